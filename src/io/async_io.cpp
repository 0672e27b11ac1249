#include "io/async_io.h"

#include <sys/uio.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"

#ifdef ZT_WITH_LIBURING
#include <liburing.h>
#endif

namespace zt::io {

namespace {

// One piece of a transfer (at most block_size bytes).
struct Piece {
  IoTicket ticket = 0;
  int fd = -1;
  bool write = false;
  char* buffer = nullptr;
  size_t bytes = 0;
  uint64_t offset = 0;
};

// Per ticket: the pieces still in flight and the first failure. Shared by both engines;
// the thread engine's workers complete pieces concurrently.
class TicketBook {
 public:
  IoTicket open(size_t pieces, std::string path) {
    std::lock_guard<std::mutex> lock(mutex_);
    const IoTicket t = ++next_;
    tickets_[t] = State{pieces, std::move(path), ""};
    return t;
  }
  void complete(IoTicket t, const std::string& error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      State& s = tickets_.at(t);
      if (!error.empty() && s.error.empty()) s.error = error;
      --s.pending;
    }
    done_.notify_all();
  }
  bool done(IoTicket t) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = tickets_.find(t);
    return it == tickets_.end() || it->second.pending == 0;
  }
  void block_until_done(IoTicket t) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] {
      const auto it = tickets_.find(t);
      return it == tickets_.end() || it->second.pending == 0;
    });
  }
  // Forgets a finished ticket; throws its failure.
  void finish(IoTicket t) {
    std::string error, path;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = tickets_.find(t);
      if (it == tickets_.end()) return;
      ZT_CHECK(it->second.pending == 0, "ticket ", t, " finished with pieces in flight");
      error = std::move(it->second.error);
      path = std::move(it->second.path);
      tickets_.erase(it);
    }
    if (!error.empty()) ZT_THROW_IO(path, ": ", error);
  }
  std::vector<IoTicket> all() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<IoTicket> out;
    for (const auto& kv : tickets_) out.push_back(kv.first);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  struct State {
    size_t pending;
    std::string path, error;
  };
  std::mutex mutex_;
  std::condition_variable done_;
  std::unordered_map<IoTicket, State> tickets_;
  IoTicket next_ = 0;
};

std::string piece_error(const Piece& p, const std::string& why) {
  return std::string(p.write ? "write" : "read") + " of " + std::to_string(p.bytes) + " bytes at offset " +
         std::to_string(p.offset) + " failed: " + why;
}

}  // namespace

class AsyncIo::Engine {
 public:
  Engine(const AioOptions& o, IoEngine kind) : options(o), kind(kind) {}
  virtual ~Engine() = default;
  // Queues the pieces of one ticket (already opened in `book`).
  virtual void submit(const std::vector<Piece>& pieces) = 0;
  virtual void wait(IoTicket t) = 0;
  virtual bool register_buffer(void* /*data*/, size_t /*bytes*/) { return false; }
  AioOptions options;
  IoEngine kind;
  TicketBook book;
};

namespace {

// ---- threads: pread/pwrite workers ------------------------------------------------------

class ThreadEngine final : public AsyncIo::Engine {
 public:
  explicit ThreadEngine(const AioOptions& o) : Engine(o, IoEngine::Threads) {
    const int n = std::clamp(o.queue_depth * o.thread_count, 1, 64);
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadEngine() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void submit(const std::vector<Piece>& pieces) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.insert(queue_.end(), pieces.begin(), pieces.end());
    }
    wake_.notify_all();
  }
  void wait(IoTicket t) override { book.block_until_done(t); }

 private:
  void loop() {
    for (;;) {
      Piece p;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ with nothing left
        p = queue_.front();
        queue_.pop_front();
      }
      const std::string e = transfer_fully(p.fd, p.write, p.buffer, p.bytes, p.offset);
      book.complete(p.ticket, e.empty() ? e : piece_error(p, e));
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Piece> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

#ifdef ZT_WITH_LIBURING

// ---- io_uring -------------------------------------------------------------------------------

class UringEngine final : public AsyncIo::Engine {
 public:
  explicit UringEngine(const AioOptions& o) : Engine(o, IoEngine::Uring) {
    entries_ = static_cast<unsigned>(std::clamp(o.queue_depth * o.thread_count, 1, 4096));
    const int rc = io_uring_queue_init(entries_, &ring_, 0);
    if (rc < 0)
      ZT_THROW_UNSUPPORTED("io_uring: cannot set up a ring of ", entries_, " entries: ", std::strerror(-rc),
                           " (RLIMIT_MEMLOCK or the container's limits); the threads engine needs no ring");
    slots_.resize(entries_);
    for (unsigned i = 0; i < entries_; ++i) free_.push_back(entries_ - 1 - i);
  }
  ~UringEngine() override {
    try {
      while (in_flight_ > 0) reap(Block::Yes);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the destructor drops errors (header)
    }
    io_uring_queue_exit(&ring_);
  }

  void submit(const std::vector<Piece>& pieces) override {
    for (const Piece& p : pieces) {
      while (free_.empty()) {
        flush();
        reap(Block::Yes);
      }
      const unsigned slot = free_.back();
      free_.pop_back();
      slots_[slot] = p;
      queue(slot);
      if (options.single_submit) flush();
      if (options.overlap_events) reap(Block::No);
    }
    flush();
  }

  void wait(IoTicket t) override {
    flush();
    while (!book.done(t)) reap(Block::Yes);
  }

  bool register_buffer(void* data, size_t bytes) override {
    if (!iovecs_.empty()) io_uring_unregister_buffers(&ring_);
    iovecs_.push_back(iovec{data, bytes});
    const int rc = io_uring_register_buffers(&ring_, iovecs_.data(), static_cast<unsigned>(iovecs_.size()));
    if (rc < 0) {
      iovecs_.pop_back();
      if (!iovecs_.empty()) io_uring_register_buffers(&ring_, iovecs_.data(), static_cast<unsigned>(iovecs_.size()));
      return false;
    }
    return true;
  }

 private:
  enum class Block { No, Yes };

  // The registered buffer holding the whole piece, or -1.
  int fixed_index(const Piece& p) const {
    for (size_t i = 0; i < iovecs_.size(); ++i) {
      const char* b = static_cast<const char*>(iovecs_[i].iov_base);
      if (p.buffer >= b && p.buffer + p.bytes <= b + iovecs_[i].iov_len) return static_cast<int>(i);
    }
    return -1;
  }

  void queue(unsigned slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (!sqe) {  // the submission queue is full of unsubmitted entries
      flush();
      sqe = io_uring_get_sqe(&ring_);
    }
    const Piece& p = slots_[slot];
    const int fixed = fixed_index(p);
    const auto len = static_cast<unsigned>(p.bytes);
    if (p.write) {
      if (fixed >= 0)
        io_uring_prep_write_fixed(sqe, p.fd, p.buffer, len, p.offset, fixed);
      else
        io_uring_prep_write(sqe, p.fd, p.buffer, len, p.offset);
    } else {
      if (fixed >= 0)
        io_uring_prep_read_fixed(sqe, p.fd, p.buffer, len, p.offset, fixed);
      else
        io_uring_prep_read(sqe, p.fd, p.buffer, len, p.offset);
    }
    io_uring_sqe_set_data64(sqe, slot);
    ++unsubmitted_;
    ++in_flight_;
  }

  void flush() {
    while (unsubmitted_ > 0) {
      const int rc = io_uring_submit(&ring_);
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) {
        reap(Block::No);
        continue;
      }
      if (rc < 0) ZT_THROW_IO("io_uring_submit: ", std::strerror(-rc));
      unsubmitted_ -= std::min<unsigned>(unsubmitted_, static_cast<unsigned>(rc));
    }
  }

  void reap(Block block) {
    io_uring_cqe* cqe = nullptr;
    int rc = block == Block::Yes && in_flight_ > 0 ? io_uring_wait_cqe(&ring_, &cqe) : io_uring_peek_cqe(&ring_, &cqe);
    while (rc == 0 && cqe) {
      const auto slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
      Piece& p = slots_[slot];
      if (res >= 0 && static_cast<size_t>(res) < p.bytes && res > 0) {
        // A short transfer: the rest goes again from where it stopped.
        p.buffer += res;
        p.offset += static_cast<uint64_t>(res);
        p.bytes -= static_cast<size_t>(res);
        queue(slot);
        flush();
      } else {
        std::string error;
        if (res < 0) error = piece_error(p, std::strerror(-res));
        if (res == 0 && p.bytes > 0) error = piece_error(p, p.write ? "no progress" : "end of file");
        free_.push_back(slot);
        book.complete(p.ticket, error);
      }
      cqe = nullptr;
      rc = io_uring_peek_cqe(&ring_, &cqe);
    }
    if (rc < 0 && rc != -EAGAIN && rc != -EINTR) ZT_THROW_IO("io_uring: waiting for completions: ", std::strerror(-rc));
  }

  io_uring ring_{};
  unsigned entries_ = 0, unsubmitted_ = 0, in_flight_ = 0;
  std::vector<Piece> slots_;
  std::vector<unsigned> free_;
  std::vector<iovec> iovecs_;
};

#endif  // ZT_WITH_LIBURING

void check_direct_alignment(const DirectFile& f, const void* buffer, size_t bytes, uint64_t offset) {
  if (f.mode() != IoMode::Direct) return;
  const auto a = static_cast<uint64_t>(kDirectAlignment);
  ZT_CHECK(reinterpret_cast<uintptr_t>(buffer) % a == 0 && bytes % a == 0 && offset % a == 0, f.path(),
           ": an O_DIRECT transfer needs its buffer, length and offset aligned to ", a, " bytes (buffer ", buffer,
           ", ", bytes, " bytes at ", offset, ")");
}

}  // namespace

bool uring_usable(std::string* why) {
#ifdef ZT_WITH_LIBURING
  static const std::string reason = [] {
    io_uring ring{};
    const int rc = io_uring_queue_init(2, &ring, 0);
    if (rc < 0) return std::string("the kernel refused io_uring_setup: ") + std::strerror(-rc);
    io_uring_queue_exit(&ring);
    return std::string();
  }();
  if (why) *why = reason;
  return reason.empty();
#else
  if (why) *why = "this build has no liburing (install liburing-dev and rebuild)";
  return false;
#endif
}

const char* io_engine_name(IoEngine e) {
  switch (e) {
    case IoEngine::Auto:
      return "auto";
    case IoEngine::Uring:
      return "io_uring";
    case IoEngine::Threads:
      return "threads";
  }
  return "?";
}

AsyncIo::AsyncIo(const AioOptions& options) {
  ZT_CHECK(options.block_size > 0 && options.queue_depth > 0 && options.thread_count > 0,
           "aio options must be positive (block_size ", options.block_size, ", queue_depth ", options.queue_depth,
           ", thread_count ", options.thread_count, ")");
  IoEngine kind = options.engine;
  std::string why;
  if (kind == IoEngine::Auto) kind = uring_usable(&why) ? IoEngine::Uring : IoEngine::Threads;
  if (kind == IoEngine::Uring && !uring_usable(&why))
    ZT_THROW_UNSUPPORTED("io_uring is not usable here: ", why, "; use the threads engine");
#ifdef ZT_WITH_LIBURING
  if (kind == IoEngine::Uring) {
    try {
      engine_ = std::make_unique<UringEngine>(options);
      return;
    } catch (const Error& e) {
      // A probe ring of 2 entries worked but this one did not (locked-memory limits):
      // chosen automatically, the thread engine takes over; asked for by name, fail.
      if (options.engine == IoEngine::Uring || e.kind() != ErrorKind::Unsupported) throw;
      ZT_WARN(e.what(), "; using the threads engine");
    }
  }
#endif
  engine_ = std::make_unique<ThreadEngine>(options);
}

AsyncIo::~AsyncIo() {
  for (IoTicket t : engine_->book.all()) {
    try {
      engine_->wait(t);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the destructor drops errors (header)
    }
  }
}

namespace {

std::vector<Piece> split(IoTicket t, int fd, bool write, char* buffer, size_t bytes, uint64_t offset, size_t block) {
  std::vector<Piece> pieces;
  for (size_t at = 0; at < bytes; at += block)
    pieces.push_back(Piece{t, fd, write, buffer + at, std::min(block, bytes - at), offset + at});
  return pieces;
}

size_t piece_count(size_t bytes, size_t block) { return bytes == 0 ? 0 : (bytes + block - 1) / block; }

}  // namespace

IoTicket AsyncIo::read(const DirectFile& file, void* buffer, size_t bytes, uint64_t offset) {
  check_direct_alignment(file, buffer, bytes, offset);
  const size_t block = engine_->options.block_size;
  const IoTicket t = engine_->book.open(piece_count(bytes, block), file.path());
  engine_->submit(split(t, file.fd(), false, static_cast<char*>(buffer), bytes, offset, block));
  return t;
}

IoTicket AsyncIo::write(const DirectFile& file, const void* buffer, size_t bytes, uint64_t offset) {
  check_direct_alignment(file, buffer, bytes, offset);
  const size_t block = engine_->options.block_size;
  const IoTicket t = engine_->book.open(piece_count(bytes, block), file.path());
  engine_->submit(split(t, file.fd(), true, static_cast<char*>(const_cast<void*>(buffer)), bytes, offset, block));
  return t;
}

void AsyncIo::wait(IoTicket ticket) {
  engine_->wait(ticket);
  engine_->book.finish(ticket);
}

void AsyncIo::wait_all() {
  for (IoTicket t : engine_->book.all()) wait(t);
}

bool AsyncIo::register_buffer(void* data, size_t bytes) { return engine_->register_buffer(data, bytes); }

IoEngine AsyncIo::engine() const { return engine_->kind; }
const AioOptions& AsyncIo::options() const { return engine_->options; }

}  // namespace zt::io
