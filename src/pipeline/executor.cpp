#include "pipeline/executor.h"

#include "core/error.h"

namespace zt::pipeline {
namespace {

// Message tags: a micro-batch's activation and its gradient apart.
int tag_of(const Instruction& i, Op kind) { return 2 * i.micro_batch + (kind == Op::SendGrad ? 1 : 0); }

}  // namespace

Executor::Executor(model::ModelStage& stage, comm::Communicator* pipeline_group, StepDriver& driver,
                   Shape activation_shape)
    : stage_(stage), group_(pipeline_group), driver_(driver), activation_shape_(std::move(activation_shape)) {}

Executor::~Executor() = default;

comm::Communicator& Executor::group() {
  ZT_CHECK(group_ != nullptr, "pipeline executor: a schedule of several stages needs the pipeline group");
  return *group_;
}

void Executor::run(const Schedule& schedule, int stage_index) {
  ZT_CHECK(schedule.slots(stage_index) <= stage_.slots(), "pipeline executor: the ", schedule.name(),
           " schedule needs ", schedule.slots(stage_index), " activation slots on stage ", stage_index,
           ", the stage has ", stage_.slots());
  ZT_CHECK(stage_.has_embedding() == (stage_index == 0) && stage_.has_head() == (stage_index + 1 == schedule.stages()),
           "pipeline executor: stage ", stage_index, " of ", schedule.stages(),
           " must hold the embedding exactly when first and the head exactly when last");
  if (schedule.stages() > 1)
    ZT_CHECK(group().size() == schedule.stages() && group().rank() == stage_index, "pipeline executor: stage ",
             stage_index, " of ", schedule.stages(), " on rank ", group().rank(), " of a pipeline group of ",
             group().size());
  stage_index_ = stage_index;
  begun_.assign(static_cast<size_t>(schedule.micro_batches()), false);
  data_.assign(static_cast<size_t>(schedule.micro_batches()), MicroBatchData());
  output_sends_.clear();
  grad_sends_.clear();
  output_sends_.resize(static_cast<size_t>(stage_.slots()));
  grad_sends_.resize(static_cast<size_t>(stage_.slots()));
  for (const std::vector<Instruction>& step : schedule.steps(stage_index))
    for (const Instruction& i : step) execute(i);
  for (auto* sends : {&output_sends_, &grad_sends_})
    for (comm::WorkPtr& w : *sends) complete(w);
}

// A send still in flight reads its slot's buffer until it completes. It is waited for only
// before that buffer is written again (never at the end of the step that posted it: two
// neighbours each waiting for their send before receiving would wait for ever once the
// messages are too large to go out eagerly).
void Executor::complete(comm::WorkPtr& send) {
  if (!send) return;
  send->wait();
  send = nullptr;
}

void Executor::begin(const Instruction& i) {
  if (begun_[static_cast<size_t>(i.micro_batch)]) return;
  begun_[static_cast<size_t>(i.micro_batch)] = true;
  driver_.begin_micro_batch(i.micro_batch, i.boundary);
}

Tensor Executor::buffer(std::vector<OwnedTensor>& buffers, int slot) {
  if (buffers.size() <= static_cast<size_t>(slot)) buffers.resize(static_cast<size_t>(slot) + 1);
  OwnedTensor& b = buffers[static_cast<size_t>(slot)];
  ZT_CHECK(activation_shape_.size() == 3, "pipeline executor: the activation shape [B, T, C] is needed between stages");
  if (!b->has_data()) b = OwnedTensor(activation_shape_, stage_.options().activation_dtype, stage_.options().device);
  return b.view();
}

void Executor::execute(const Instruction& i) {
  if (i.micro_batch >= 0) begin(i);
  MicroBatchData& data = i.micro_batch >= 0 ? data_[static_cast<size_t>(i.micro_batch)] : data_.front();
  switch (i.op) {
    case Op::LoadMicroBatch:
      data = driver_.load(i.micro_batch);
      return;
    case Op::RecvActivation:
      group().recv(buffer(received_, i.slot), stage_index_ - 1, tag_of(i, Op::SendActivation));
      return;
    case Op::Forward: {
      complete(output_sends_[static_cast<size_t>(i.slot)]);
      model::StageInput in;
      if (stage_.has_embedding())
        in.tokens = data.tokens;
      else
        in.hidden = buffer(received_, i.slot);
      in.targets = data.targets;
      in.segment_starts = data.segment_starts;
      stage_.forward(i.slot, in);
      return;
    }
    case Op::SendActivation:
      output_sends_[static_cast<size_t>(i.slot)] =
          group().send_async(stage_.output(i.slot), stage_index_ + 1, tag_of(i, Op::SendActivation));
      return;
    case Op::RecvGrad:
      group().recv(buffer(grads_, i.slot), stage_index_ + 1, tag_of(i, Op::SendGrad));
      return;
    case Op::Backward:
      complete(grad_sends_[static_cast<size_t>(i.slot)]);
      if (stage_.has_head())
        driver_.loss(i.micro_batch, stage_.backward_from_loss(i.slot, driver_.grad_scale(i.micro_batch)));
      else
        stage_.backward(i.slot, buffer(grads_, i.slot));
      driver_.end_micro_batch(i.micro_batch);
      return;
    case Op::SendGrad:
      grad_sends_[static_cast<size_t>(i.slot)] =
          group().send_async(stage_.input_grad(i.slot), stage_index_ - 1, tag_of(i, Op::SendGrad));
      return;
    case Op::ReduceGrads:
      driver_.reduce_grads();
      return;
    case Op::OptimizerStep:
      driver_.optimizer_step();
      return;
  }
}

}  // namespace zt::pipeline
