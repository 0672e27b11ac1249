// zt::Accelerator (include/zerotrain/accelerator.h): a thin state machine over the
// pieces `zerotrain train` uses (train/training_run.h), so a custom loop and the
// built-in one cannot drift apart.
#include "zerotrain/accelerator.h"

#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "train/run_config.h"
#include "train/training_run.h"

namespace zt {

struct Accelerator::Impl {
  std::unique_ptr<train::TrainingRun> run;
  OwnedTensor tokens, targets;  // next_batch()'s buffers
  // Accumulation window: micro-batches since the last boundary, whether step() ran in
  // this window, and the clip coefficient clip_grad_norm() chose for its step.
  int64_t pending = 0;
  bool stepped = false;
  float clip = 1.0f;

  bool at_boundary() const { return pending == run->grad_accum; }
  void start_window() {
    pending = 0;
    stepped = false;
    clip = 1.0f;
  }
};

Accelerator::Accelerator(const std::vector<std::string>& args) : Accelerator(train::load_train_config(args)) {}

Accelerator::Accelerator(const train::TrainConfig& config) : impl_(std::make_unique<Impl>()) {
  if (config.world_size != 1)
    ZT_THROW_UNSUPPORTED(config.source, ": world size ", config.world_size,
                         " (num_processes): the Accelerator API runs one process; set num_processes: 1 or train "
                         "with `zerotrain train`");
  impl_->run = train::start_training_run(config);
  train::TrainingRun& run = *impl_->run;
  // The reports of `zerotrain train`'s log; a custom loop prints what it wants.
  if (run.config.wall_clock_breakdown)
    ZT_WARN("wall_clock_breakdown: no effect in the Accelerator API (`zerotrain train` prints the per-step times; "
            "time your own loop)");
  if (run.config.memory_breakdown)
    ZT_WARN("memory_breakdown: no effect in the Accelerator API (`zerotrain train` prints it; your loop prints "
            "what it wants)");
  train::remove_stale_outputs(run);  // as `zerotrain train`: what killed saves left
  if (!run.config.resume.empty()) train::load_run_checkpoint(run, run.config.resume);
  impl_->tokens = OwnedTensor({run.micro_batch, run.seq_len}, DType::I32);
  impl_->targets = OwnedTensor({run.micro_batch, run.seq_len}, DType::I32);
  train::zero_grads(run);
}

Accelerator::~Accelerator() = default;
Accelerator::Accelerator(Accelerator&&) noexcept = default;
Accelerator& Accelerator::operator=(Accelerator&&) noexcept = default;

Accelerator::Batch Accelerator::next_batch() {
  Impl& s = *impl_;
  s.run->loader->next(s.tokens, s.targets);
  const Tensor& t = s.tokens;
  return {t.data_as<int32_t>(), s.targets.view().data_as<int32_t>(), t.size(0), t.size(1)};
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
  if (s.at_boundary()) s.start_window();  // gradients stay unless zero_grad() cleared them, as in PyTorch
  // The model only reads the batch; Tensor views are non-const by design.
  const Tensor tok(const_cast<int32_t*>(batch.tokens), {batch.batch_size, batch.seq_len}, DType::I32);
  const Tensor tgt(const_cast<int32_t*>(batch.targets), {batch.batch_size, batch.seq_len}, DType::I32);
  const double loss = train::forward_backward_micro(*s.run, tok, tgt, s.run->scaler.scale());
  ++s.pending;
  return loss;
}

bool Accelerator::is_accumulation_boundary() const { return impl_->at_boundary(); }

double Accelerator::clip_grad_norm(double max_norm) {
  Impl& s = *impl_;
  const double norm = train::unscaled_grad_norm(*s.run, s.run->scaler.scale());
  s.clip = train::clip_coefficient(norm, max_norm);
  return norm;
}

double Accelerator::max_grad_norm() const { return impl_->run->config.gradient_clipping; }

bool Accelerator::step() {
  Impl& s = *impl_;
  if (!s.at_boundary() || s.stepped) return false;
  s.stepped = true;
  // The scale the gradients carry: skip_step() may change it for the next window.
  const float scale = s.run->scaler.scale();
  const bool skipped = train::skip_step(*s.run);
  if (!skipped) train::apply_update(*s.run, train::next_lr(*s.run), s.clip, scale);
  train::count_global_step(*s.run);  // a skipped step is a global step too (DeepSpeed)
  return !skipped;
}

void Accelerator::zero_grad() {
  Impl& s = *impl_;
  if (s.pending != 0 && !s.at_boundary()) return;  // mid-accumulation: Accelerate does nothing either
  train::zero_grads(*s.run);
  s.start_window();
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
  if (s.pending > 0 && !s.stepped)
    ZT_THROW_INPUT("Accelerator::save_state: ", s.pending, " micro-batch(es) of gradients are accumulated but not "
                   "applied, and a checkpoint does not hold them: save after step()");
  return train::save_run_checkpoint(*s.run, dir.empty() ? s.run->checkpoint_root().string() : dir);
}

void Accelerator::load_state(const std::string& dir) {
  Impl& s = *impl_;
  train::load_run_checkpoint(*s.run, dir.empty() ? s.run->checkpoint_root().string() : dir);
  train::zero_grads(*s.run);
  s.start_window();
}

void Accelerator::save_pretrained(const std::string& dir) const {
  const train::TrainingRun& run = *impl_->run;
  train::save_final_model(run.model(), run.setup, dir, train::storage_dtype(run.config.precision));
}

void Accelerator::print_line(const std::string& line) const {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

model::Transformer& Accelerator::model() { return impl_->run->model(); }
const train::TrainConfig& Accelerator::config() const { return impl_->run->config; }

}  // namespace zt
