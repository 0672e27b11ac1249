// zt::Accelerator: write your own training loop, in the spirit of HF Accelerate.
//
// The configs are the ones `zerotrain train` reads (run.yaml, ds_config.json, Accelerate
// YAML, --key value overrides); constructing an Accelerator does what Accelerate's
// prepare() does: it builds the model (preset or HF directory), tokenizer, optimizer, LR
// schedule, fp16 loss scaler and data loader from them (and resumes when the config
// says `resume`). A loop that follows the pattern below takes exactly the steps
// `zerotrain train` takes, bit for bit:
//
//   zt::Accelerator acc({"run.yaml", "--max_steps", "100"});
//   while (acc.global_step() < acc.max_steps()) {
//     double loss = acc.backward(acc.next_batch());
//     if (acc.sync_gradients()) {
//       acc.clip_grad_norm(acc.max_grad_norm());
//       bool applied = acc.step();    // false: fp16 overflow, step skipped (still a global step)
//       acc.zero_grad();
//     }
//   }
//   acc.save_pretrained("out/final");
//
// As in Accelerate, step() and zero_grad() do nothing between accumulation boundaries,
// so they may also be called after every micro-batch. Started as several processes
// (mpirun, srun, `zerotrain launch`), every rank runs the same loop on its slice of each
// global batch, with the ZeRO stage of the config, as `zerotrain train` does. Errors are
// zt::Error (core/error.h) naming what is wrong and the fix. examples/custom_loop.cpp is a
// complete program.
#pragma once
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace zt {
namespace config {
struct TrainConfig;
}
namespace model {
class Transformer;
}

class Accelerator {
 public:
  // Arguments as `zerotrain train` takes them (without --threads / --log-level):
  //   [run.yaml|run.json] [--deepspeed ds_config.json] [--config_file accelerate.yaml]
  //   [--section.key value ...]            (docs/configs.md lists every key)
  explicit Accelerator(const std::vector<std::string>& args);
  // A resolved config (config/run_config.h: load_train_config).
  explicit Accelerator(const config::TrainConfig& config);
  ~Accelerator();
  Accelerator(Accelerator&&) noexcept;
  Accelerator& operator=(Accelerator&&) noexcept;
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // A micro-batch of token ids, row-major [batch_size, seq_len]; targets are the inputs
  // shifted by one (-100 = ignored). Build your own to train on other data.
  struct Batch {
    const int32_t* tokens = nullptr;
    const int32_t* targets = nullptr;
    int64_t batch_size = 0;
    int64_t seq_len = 0;
    // Packed SFT samples (data.packing: true): for each token the index in its row of its
    // sample's first token; attention stays inside each sample and positions restart there.
    // Null: each row is one sequence.
    const int32_t* segment_starts = nullptr;
  };
  // The next micro-batch of the training data (seeded order, epochs wrap). The views
  // stay valid until the next call.
  Batch next_batch();
  // Forward and backward of one micro-batch: gradients of the mean token loss, times the
  // fp16 loss scale, divided by the gradient accumulation steps, are added to the
  // model's gradients. Returns the micro-batch's mean token loss (unscaled).
  double backward(const Batch& batch);

  // True once gradient_accumulation_steps micro-batches have been accumulated since the
  // last zero_grad(): the step() that follows updates the weights. sync_gradients() is
  // Accelerate's name for it (gradients are synchronised only there).
  bool is_accumulation_boundary() const;
  bool sync_gradients() const { return is_accumulation_boundary(); }
  // The global norm of the accumulated gradients (loss scale removed). With max_norm > 0
  // the next step() scales the gradients by max_norm / (norm + 1e-6) when the norm is
  // larger. Returns inf/nan when fp16 gradients overflowed.
  double clip_grad_norm(double max_norm);
  // The config's clipping threshold (ds_config gradient_clipping / max_grad_norm; 0 = off).
  double max_grad_norm() const;
  // At a boundary: fp16 overflow check and loss-scale update, then (without overflow)
  // one optimizer update with the scheduled learning rate; either way global_step()
  // advances by one. Returns whether the weights were updated: false on overflow (the
  // step is skipped and the schedule does not advance, but it counts as a global step,
  // as in DeepSpeed) and away from a boundary (nothing happens, no step counted). Non-finite
  // gradients in a run that does not skip them (fp32; bf16 without check_grad_overflow),
  // or 3 skipped steps in a row without a dynamic loss scale, throw (exit code 2) before
  // any update, as `zerotrain train` stops (docs/checkpoints.md, "Non-finite values").
  bool step();
  // Clears the gradients at a boundary (after step()); does nothing mid-accumulation.
  void zero_grad();

  // The learning rate of the next update.
  float lr() const;
  float loss_scale() const;  // 1 without fp16
  // Global steps taken, DeepSpeed's global_steps: fp16 steps skipped on overflow count
  // too, so a loop up to max_steps() takes exactly the steps `zerotrain train` takes.
  int64_t global_step() const;
  int64_t optimizer_steps() const;  // updates applied: global_step() - skipped_steps()
  int64_t skipped_steps() const;    // steps skipped on fp16 overflow
  int64_t max_steps() const;        // the run's total global steps (max_steps, or from epochs and the data)
  int64_t gradient_accumulation_steps() const;
  const std::string& output_dir() const;  // the config's output_dir (created)

  // Mean validation loss over `batches` micro-batches (0: the config's eval_batches),
  // always from the start of the validation data; NaN when the run has none.
  double evaluate(int64_t batches = 0);

  // Training state (weights, optimizer, schedule position, loss scaler, data position):
  // writes <dir>/global_step<N>/ and <dir>/latest, keeping the config's keep_last, and
  // returns the checkpoint written. "" = <output_dir>/checkpoints. Call it between steps
  // (gradients accumulated but not yet applied are not saved: that is an error).
  std::string save_state(const std::string& dir = "");
  // Loads a checkpoint directory, or the one <dir>/latest names ("" =
  // <output_dir>/checkpoints); the loop then continues exactly as the saved run did.
  void load_state(const std::string& dir = "");
  // An HF model directory (config.json, safetensors in the run's precision, tokenizer),
  // written by the main process; every rank calls it (ZeRO-3 gathers the weights first).
  void save_pretrained(const std::string& dir) const;

  // The data-parallel ranks (mpirun, srun or `zerotrain launch` start one process per
  // rank; each takes its slice of every global batch): this process's rank, their
  // number, whether this is rank 0, and a barrier over all of them.
  int process_index() const;
  int num_processes() const;
  bool is_main_process() const { return process_index() == 0; }
  void wait_for_everyone();
  // Prints the arguments (streamed with <<) and a newline, on the main process only.
  template <class... Args>
  void print(const Args&... args) const {
    if (!is_main_process()) return;
    std::ostringstream line;
    (line << ... << args);
    print_line(line.str());
  }

  model::Transformer& model();
  const config::TrainConfig& config() const;

 private:
  void print_line(const std::string& line) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
