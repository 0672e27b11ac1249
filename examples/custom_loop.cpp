// A training loop of your own, written with zt::Accelerator (include/zerotrain/accelerator.h):
// the configs are the ones `zerotrain train` reads, the loop is yours. Run:
//
//   zerotrain_example_custom_loop                        # examples/default_run.yaml, 20 steps
//   zerotrain_example_custom_loop run.yaml --deepspeed ds_config.json --max_steps 100
//
// It takes the same steps `zerotrain train` takes on the same config, bit for bit
// (tests/e2e/accelerator_test.cpp checks that), then evaluates, saves a checkpoint
// (resume with --resume latest) and an HF model directory.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "zerotrain/accelerator.h"

int main(int argc, char** argv) try {
  std::vector<std::string> args(argv + 1, argv + argc);
#ifdef ZT_SOURCE_DIR  // built in zerotrain's own tree
  const std::string default_run = std::string(ZT_SOURCE_DIR) + "/examples/default_run.yaml";
#else  // built against an installed zerotrain (find_package): run it from a zerotrain checkout
  const std::string default_run = "examples/default_run.yaml";
#endif
  if (args.empty())
    args = {default_run,
            "--max_steps",
            "20",
            "--output_dir",
            "out/custom_loop",
            "--overwrite_output_dir"};  // a re-run replaces the last one

  // Builds the model, tokenizer, data loader, optimizer, LR schedule and loss scaler.
  zt::Accelerator acc(args);
  acc.print("training for ", acc.max_steps(), " steps of ", acc.gradient_accumulation_steps(),
            " micro-batch(es); writing to ", acc.output_dir());

  double loss_sum = 0;  // over the micro-batches of the current step
  int64_t micro_batches = 0;
  while (acc.global_step() < acc.max_steps()) {
    const zt::Accelerator::Batch batch = acc.next_batch();
    loss_sum += acc.backward(batch);
    ++micro_batches;
    if (!acc.sync_gradients()) continue;  // still accumulating

    const float lr = acc.lr();  // read before step(): the rate this update uses
    const double grad_norm = acc.clip_grad_norm(acc.max_grad_norm());
    const bool applied = acc.step();
    acc.zero_grad();
    const double loss = loss_sum / static_cast<double>(micro_batches);
    loss_sum = 0;
    micro_batches = 0;

    if (!applied) {
      acc.print("fp16 overflow: step skipped, loss scale now ", acc.loss_scale());
    } else if (acc.global_step() % 5 == 0 || acc.global_step() == acc.max_steps()) {
      acc.print("step ", acc.global_step(), "/", acc.max_steps(), " | loss ", loss, " | lr ", lr, " | grad norm ",
                grad_norm);
    }
  }

  const double val_loss = acc.evaluate();
  if (!std::isnan(val_loss)) acc.print("validation loss ", val_loss, " | perplexity ", std::exp(val_loss));

  const std::string checkpoint = acc.save_state();  // <output_dir>/checkpoints/global_stepN
  const std::string model_dir = acc.output_dir() + "/final";
  acc.save_pretrained(model_dir);
  acc.wait_for_everyone();
  acc.print("saved ", checkpoint, " and the HF model ", model_dir);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custom_loop: %s\n", e.what());
  return 1;
}
