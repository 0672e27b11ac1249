#include "zero/param_swap.h"

#include <algorithm>
#include <exception>

#include "core/error.h"

namespace zt::zero {

ParamSwap::ParamSwap(const ParamNvme& options, int rank, Pinning pinning)
    : buffer_count_(std::max(1, options.buffer_count)),
      pinning_(pinning),
      file_(SwapFileOptions{options.nvme_path, "params", rank, options.aio}) {}

// The transfers in flight use the buffers, which go before the swap file: wait first.
ParamSwap::~ParamSwap() { file_.drain(); }

void ParamSwap::add(size_t unit, int64_t numel, DType dtype) {
  ZT_CHECK(!laid_out_, "parameters declared after the swap file was laid out");
  if (blocks_.size() <= unit) blocks_.resize(unit + 1);
  Block& b = blocks_[unit];
  b.present = true;
  b.numel = numel;
  b.dtype = dtype;
  b.bytes = io::round_up_to_direct(static_cast<size_t>(numel) * dtype_size(dtype));
  b.offset = file_bytes_;
  file_bytes_ += b.bytes;
  buffer_bytes_ = std::max(buffer_bytes_, b.bytes);
}

void ParamSwap::layout_done() {
  ZT_CHECK(!laid_out_, "the swap file is laid out once");
  laid_out_ = true;
  file_.reserve(file_bytes_);
  buffers_.resize(static_cast<size_t>(buffer_count_));
  for (Buffer& b : buffers_) {
    b.memory = HostBuffer(buffer_bytes_, pinning_);
    file_.register_buffer(b.memory.data(), buffer_bytes_);
  }
}

const ParamSwap::Block& ParamSwap::block(size_t unit) const {
  ZT_CHECK(unit < blocks_.size() && blocks_[unit].present, "unit ", unit, " has no swapped parameters");
  return blocks_[unit];
}

ParamSwap::Buffer* ParamSwap::holding(size_t unit) {
  for (Buffer& b : buffers_)
    if (b.state != State::Free && b.unit == unit) return &b;
  return nullptr;
}

bool ParamSwap::quiet(Buffer& b) {
  if (b.waited_on || b.writing || b.state == State::Reading) return false;
  if (b.reader && !b.reader->done()) return false;
  b.reader.reset();
  return true;
}

Tensor ParamSwap::view(Buffer& b) {
  const Block& k = block(b.unit);
  return Tensor(b.memory.data(), {k.numel}, k.dtype);
}

void ParamSwap::start_read(Buffer& b, size_t unit) {
  const Block& k = block(unit);
  b.unit = unit;
  b.state = State::Reading;
  b.last_use = ++clock_;
  try {
    b.read_ticket = file_.read(b.memory.data(), k.bytes, k.offset);
  } catch (...) {
    b.state = State::Free;
    throw;
  }
}

void ParamSwap::start_write(Buffer& b) {
  const Block& k = block(b.unit);
  b.write_ticket = file_.write(b.memory.data(), k.bytes, k.offset);
  b.writing = true;
}

void ParamSwap::wait_outside(Lock& lock, Buffer& b) {
  enum class What { Read, Write, Reader } what;
  io::IoTicket ticket = 0;
  std::optional<cuda::CopyEvent> reader;
  if (b.state == State::Reading) {
    what = What::Read;
    ticket = b.read_ticket;
  } else if (b.writing) {
    what = What::Write;
    ticket = b.write_ticket;
  } else {
    ZT_CHECK(b.reader.has_value(), "waiting on a parameter buffer with nothing in flight");
    what = What::Reader;
    reader = std::move(b.reader);  // ours to wait for: a later release may record another
    b.reader.reset();
  }
  b.waited_on = true;
  lock.unlock();
  std::exception_ptr error;
  try {
    if (what == What::Reader)
      reader->wait();
    else
      file_.wait(ticket, what == What::Read ? IoDirection::Read : IoDirection::Write);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  b.waited_on = false;
  if (what == What::Read) b.state = error ? State::Free : State::Ready;  // a failed read holds nothing
  if (what == What::Write) b.writing = false;
  changed_.notify_all();
  if (error) std::rethrow_exception(error);
}

ParamSwap::Buffer* ParamSwap::claim(Lock& lock) {
  for (Buffer& b : buffers_)
    if (b.state == State::Free && !b.waited_on) return &b;
  // The least recently used buffer that needs no waiting.
  Buffer* victim = nullptr;
  for (Buffer& b : buffers_)
    if (b.state == State::Ready && quiet(b) && (!victim || b.last_use < victim->last_use)) victim = &b;
  if (victim) {
    victim->state = State::Free;
    return victim;
  }
  // Else the oldest whose write-back or device copy is still in flight, else a
  // prefetch's read (wasted, but the acquire goes on); failing all, the other thread
  // holds every buffer: wait for a release.
  Buffer* wait = nullptr;
  for (Buffer& b : buffers_)
    if (b.state == State::Ready && !b.waited_on && (!wait || b.last_use < wait->last_use)) wait = &b;
  for (Buffer& b : buffers_)
    if (!wait && b.state == State::Reading && !b.waited_on) wait = &b;
  const bool all_mine = std::all_of(buffers_.begin(), buffers_.end(), [](const Buffer& b) {
    return b.state == State::InUse && b.owner == std::this_thread::get_id();
  });
  ZT_CHECK(!all_mine, "offload_param nvme: this thread holds all ", buffers_.size(),
           " parameter swap buffers and asks for another");
  if (wait)
    wait_outside(lock, *wait);
  else
    changed_.wait(lock);
  return nullptr;
}

Tensor ParamSwap::acquire(size_t unit, ParamIntent intent) {
  block(unit);  // swapped here
  Lock lock(mutex_);
  ZT_CHECK(laid_out_, "parameters acquired before the swap file was laid out");
  for (;;) {
    Buffer* b = holding(unit);
    if (!b) {
      b = claim(lock);
      if (!b) continue;  // waited: look again
      if (intent == ParamIntent::Overwrite) {
        b->unit = unit;
        b->state = State::InUse;
        b->owner = std::this_thread::get_id();
        b->last_use = ++clock_;
        return view(*b);
      }
      start_read(*b, unit);
      continue;
    }
    if (b->state == State::InUse) {  // the other thread has it
      ZT_CHECK(b->owner != std::this_thread::get_id(), "the parameters of unit ", unit, " acquired twice");
      changed_.wait(lock);
      continue;
    }
    // Reading it needs its read done; overwriting it, also its write-back and copies.
    const bool wait = b->state == State::Reading || (intent == ParamIntent::Overwrite && !quiet(*b));
    if (wait) {
      if (b->waited_on)
        changed_.wait(lock);
      else
        wait_outside(lock, *b);
      continue;
    }
    b->state = State::InUse;
    b->owner = std::this_thread::get_id();
    b->last_use = ++clock_;
    return view(*b);
  }
}

void ParamSwap::release(size_t unit, ParamChange change, std::optional<cuda::CopyEvent> reader) {
  Lock lock(mutex_);
  Buffer* b = holding(unit);
  ZT_CHECK(b && b->state == State::InUse, "releasing the parameters of unit ", unit, " that are not acquired");
  // One copy stream reads the buffers: a later event implies the earlier ones.
  if (reader) b->reader = std::move(reader);
  b->last_use = ++clock_;
  try {
    if (change == ParamChange::Modified) {
      // A write-back of earlier contents may still run (the buffer was read meanwhile):
      // the new one goes after it.
      while (b->writing) {
        if (b->waited_on)
          changed_.wait(lock);
        else
          wait_outside(lock, *b);
      }
      start_write(*b);
    }
  } catch (...) {
    b->state = State::Ready;
    changed_.notify_all();
    throw;
  }
  b->state = State::Ready;
  changed_.notify_all();
}

bool ParamSwap::prefetch(size_t unit) {
  if (unit >= blocks_.size() || !blocks_[unit].present) return false;
  const Lock lock(mutex_);
  if (!laid_out_) return false;
  if (holding(unit)) return true;
  // Never waits (the caller goes on computing), and leaves a buffer for the acquire that
  // comes before this unit's.
  size_t busy = 0;
  for (const Buffer& b : buffers_) busy += b.state == State::Reading || b.state == State::InUse;
  if (busy + 1 >= buffers_.size()) return false;
  Buffer* target = nullptr;
  for (Buffer& b : buffers_)
    if (!target && b.state == State::Free && !b.waited_on) target = &b;
  if (!target)
    for (Buffer& b : buffers_)
      if (b.state == State::Ready && quiet(b) && (!target || b.last_use < target->last_use)) target = &b;
  if (!target) return false;
  start_read(*target, unit);
  return true;
}

void ParamSwap::flush() {
  Lock lock(mutex_);
  for (;;) {
    Buffer* writing = nullptr;
    for (Buffer& b : buffers_)
      if (!writing && b.writing) writing = &b;
    if (!writing) return;
    if (writing->waited_on)
      changed_.wait(lock);
    else
      wait_outside(lock, *writing);
  }
}

}  // namespace zt::zero
