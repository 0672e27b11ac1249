// zt::Accelerator (include/zerotrain/accelerator.h): a thin state machine over what
// `zerotrain train` uses — the run (train/training_run.h) and its optimizer steps
// (train/step_protocol.h) — so a custom loop and the built-in one cannot drift apart.
#include "zerotrain/accelerator.h"

#include <cstdio>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "comm/env.h"
#include "config/run_config.h"
#include "train/step_protocol.h"
#include "train/training_run.h"

namespace zt {

struct Accelerator::Impl {
  std::unique_ptr<train::TrainingRun> run;
  OwnedTensor tokens, targets;  // next_batch()'s buffers
  OwnedTensor segment_starts;   // next_batch()'s, when the data packs SFT samples
  // The accumulation window: the optimizer step its micro-batches go into, and the
  // clipping threshold clip_grad_norm() chose for it (0: none).
  std::optional<train::OptimizerStep> step;
  double max_norm = 0;

  bool at_boundary() const { return step->complete(); }
  void start_window(train::Gradients gradients) {
    step.reset();  // before the next one starts: it may clear the gradients
    step.emplace(*run, gradients);
    max_norm = 0;
  }
};

namespace {

// As `zerotrain train` resolves its command line: the batch arithmetic uses the job's real
// world size (every rank runs the same program with the same arguments).
config::TrainConfig config_for_this_job(const std::vector<std::string>& args) {
  config::LoadOptions lo;
  const comm::LaunchEnv job = comm::read_launch_env();
  lo.world_size = job.world_size;
  lo.world_source = job.source == "default" ? config::WorldSource::PlainProcess : config::WorldSource::Launcher;
  return config::load_train_config(args, lo);
}

}  // namespace

Accelerator::Accelerator(const std::vector<std::string>& args) : Accelerator(config_for_this_job(args)) {}

Accelerator::Accelerator(const config::TrainConfig& config) : impl_(std::make_unique<Impl>()) {
  impl_->run = train::start_training_run(config);
  train::TrainingRun& run = *impl_->run;
  // The reports of `zerotrain train`'s log; a custom loop prints what it wants.
  if (run.config.wall_clock_breakdown)
    ZT_WARN(
        "wall_clock_breakdown: no effect in the Accelerator API (`zerotrain train` prints the per-step times; "
        "time your own loop)");
  if (run.config.memory_breakdown)
    ZT_WARN(
        "memory_breakdown: no effect in the Accelerator API (`zerotrain train` prints it; your loop prints "
        "what it wants)");
  train::remove_stale_outputs(run);  // as `zerotrain train`: what killed saves left
  if (!run.config.resume.empty()) train::load_run_checkpoint(run, run.config.resume);
  impl_->tokens = OwnedTensor({run.micro_batch, run.seq_len}, DType::I32);
  impl_->targets = OwnedTensor({run.micro_batch, run.seq_len}, DType::I32);
  if (run.loader->packs_samples()) impl_->segment_starts = OwnedTensor({run.micro_batch, run.seq_len}, DType::I32);
  impl_->start_window(train::Gradients::Clear);
}

Accelerator::~Accelerator() = default;
Accelerator::Accelerator(Accelerator&&) noexcept = default;
Accelerator& Accelerator::operator=(Accelerator&&) noexcept = default;

Accelerator::Batch Accelerator::next_batch() {
  Impl& s = *impl_;
  s.run->loader->next(s.tokens, s.targets, s.segment_starts);
  const Tensor& t = s.tokens;
  return {t.data_as<int32_t>(), s.targets.view().data_as<int32_t>(), t.size(0), t.size(1),
          s.segment_starts->has_data() ? s.segment_starts.data<int32_t>() : nullptr};
}

double Accelerator::backward(const Batch& batch) {
  Impl& s = *impl_;
  if (!batch.tokens || !batch.targets || batch.batch_size < 1 || batch.seq_len < 1)
    ZT_THROW_INPUT("Accelerator::backward: empty batch (", batch.batch_size, " x ", batch.seq_len,
                   "): pass next_batch() or fill tokens, targets and both sizes");
  const int64_t context = s.run->model().config().max_position_embeddings;
  if (batch.seq_len > context)
    ZT_THROW_INPUT("Accelerator::backward: seq_len ", batch.seq_len, " exceeds the model's context ", context,
                   ": use shorter windows");
  if (s.at_boundary()) s.start_window(train::Gradients::Keep);  // unless zero_grad() cleared them, as in PyTorch
  // The model only reads the batch; Tensor views are non-const by design.
  const Tensor tok(const_cast<int32_t*>(batch.tokens), {batch.batch_size, batch.seq_len}, DType::I32);
  const Tensor tgt(const_cast<int32_t*>(batch.targets), {batch.batch_size, batch.seq_len}, DType::I32);
  const Tensor seg = batch.segment_starts ? Tensor(const_cast<int32_t*>(batch.segment_starts),
                                                   {batch.batch_size, batch.seq_len}, DType::I32)
                                          : Tensor();
  train::OptimizerStep::MicroBatch micro = s.step->micro_batch();
  return micro.forward_backward(tok, tgt, seg);  // the micro-batch ends as `micro` goes
}

bool Accelerator::is_accumulation_boundary() const { return impl_->at_boundary(); }

double Accelerator::clip_grad_norm(double max_norm) {
  Impl& s = *impl_;
  s.max_norm = max_norm;  // step() clips to it, from the same norm
  return s.step->grad_norm();
}

double Accelerator::max_grad_norm() const { return impl_->run->config.gradient_clipping; }

bool Accelerator::step() {
  Impl& s = *impl_;
  if (!s.at_boundary() || s.step->finished()) return false;
  return s.step->finish(s.max_norm).applied;  // a skipped step is a global step too (DeepSpeed)
}

void Accelerator::zero_grad() {
  Impl& s = *impl_;
  // Mid-accumulation Accelerate does nothing either; after a failed micro-batch the window starts over.
  if (s.step->micro_batches() != 0 && !s.at_boundary() && !s.step->failed()) return;
  s.start_window(train::Gradients::Clear);
}

float Accelerator::lr() const { return train::next_lr(*impl_->run); }
float Accelerator::loss_scale() const { return impl_->run->scaler.scale(); }
int64_t Accelerator::global_step() const { return impl_->run->step; }
int64_t Accelerator::optimizer_steps() const { return impl_->run->optimizer->steps_taken(); }
int64_t Accelerator::skipped_steps() const { return impl_->run->scaler.skipped_steps(); }
int64_t Accelerator::max_steps() const { return impl_->run->total_steps; }
int64_t Accelerator::gradient_accumulation_steps() const { return impl_->run->grad_accum; }
const std::string& Accelerator::output_dir() const { return impl_->run->config.output_dir; }

double Accelerator::evaluate(int64_t batches) {
  train::TrainingRun& run = *impl_->run;
  return train::validation_loss(run, batches > 0 ? batches : run.config.eval_batches);
}

std::string Accelerator::save_state(const std::string& dir) {
  Impl& s = *impl_;
  if (s.step->micro_batches() > 0 && !s.step->finished())
    ZT_THROW_INPUT("Accelerator::save_state: ", s.step->micro_batches(),
                   " micro-batch(es) of gradients are accumulated but not "
                   "applied, and a checkpoint does not hold them: save after step()");
  return train::save_run_checkpoint(*s.run, dir.empty() ? s.run->checkpoint_root().string() : dir);
}

void Accelerator::load_state(const std::string& dir) {
  Impl& s = *impl_;
  train::load_run_checkpoint(*s.run, dir.empty() ? s.run->checkpoint_root().string() : dir);
  s.start_window(train::Gradients::Clear);
}

void Accelerator::save_pretrained(const std::string& dir) const {
  train::TrainingRun& run = *impl_->run;
  run.engine->gather_full_model();  // ZeRO-3: every rank's slices (collective); else nothing
  if (run.is_main_rank())
    train::save_final_model(run.model(), run.setup, dir, train::storage_dtype(run.config.precision));
  run.world_comm().barrier();  // the directory is complete for every rank
  run.engine->release_full_model();
}

int Accelerator::process_index() const { return impl_->run->rank(); }
int Accelerator::num_processes() const { return impl_->run->world_size(); }
void Accelerator::wait_for_everyone() { impl_->run->world_comm().barrier(); }

void Accelerator::print_line(const std::string& line) const {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

model::Transformer& Accelerator::model() { return impl_->run->model(); }
const config::TrainConfig& Accelerator::config() const { return impl_->run->config; }

}  // namespace zt
