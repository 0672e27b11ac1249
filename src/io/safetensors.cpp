#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt::io {
namespace {

using nlohmann::json;

// Every dtype of the format, with its width in bits (sub-byte types are packed).
struct DtypeEntry {
  const char* name;
  unsigned bits;
  bool supported;
  DType dtype;
};
constexpr DtypeEntry kDtypes[] = {
    {"F32", 32, true, DType::F32},     {"BF16", 16, true, DType::BF16},     {"F16", 16, true, DType::F16},
    {"I32", 32, true, DType::I32},     {"I64", 64, true, DType::I64},       {"F64", 64, false, DType::F32},
    {"I16", 16, false, DType::F32},    {"I8", 8, false, DType::F32},        {"U8", 8, false, DType::F32},
    {"BOOL", 8, false, DType::F32},    {"U16", 16, false, DType::F32},      {"U32", 32, false, DType::F32},
    {"U64", 64, false, DType::F32},    {"F8_E4M3", 8, true, DType::F8E4M3}, {"F8_E5M2", 8, true, DType::F8E5M2},
    {"F8_E8M0", 8, false, DType::F32}, {"F4", 4, false, DType::F32},        {"F6_E2M3", 6, false, DType::F32},
    {"F6_E3M2", 6, false, DType::F32},
};

const DtypeEntry* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// The order the reference writer lays out data: its Dtype enum order, largest first.
// Larger dtypes first keeps every tensor naturally aligned.
int write_rank(DType dtype) {
  switch (dtype) {
    case DType::I64:
      return 6;
    case DType::F32:
      return 5;
    case DType::I32:
      return 4;
    case DType::BF16:
      return 3;
    case DType::F16:
      return 2;
    case DType::F8E4M3:
      return 1;
    case DType::F8E5M2:
      return 0;
  }
  return 0;
}

struct HeaderViolation {
  std::string message;
};

// A non-negative JSON integer, or throws `what`.
bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    out = static_cast<uint64_t>(s);
    return true;
  }
  return false;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

// ---- reader -----------------------------------------------------------------------

SafetensorsReader::SafetensorsReader(const std::string& path, Prefault prefault) : file_(path, prefault) {
  const std::string& p = file_.path();
  const uint64_t file_size = file_.size();
  if (file_size < 8)
    ZT_THROW_INPUT(p, ": not a safetensors file (", file_size, " bytes; the 8-byte header length is missing)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file_.data()[i];
  if (n > kMaxSafetensorsHeader)
    ZT_THROW_INPUT(p, ": safetensors header length ", n, " exceeds the limit of ", kMaxSafetensorsHeader,
                   " bytes (corrupt file, or not safetensors)");
  if (n > file_size - 8)
    ZT_THROW_INPUT(p, ": safetensors header length ", n, " runs past the end of the file (", file_size,
                   " bytes): the file is truncated or corrupt");
  header_size_ = n;
  const uint64_t data_size = file_size - 8 - n;
  const char* hbegin = reinterpret_cast<const char*>(file_.data() + 8);

  // Parse, refusing duplicate top-level keys and deep nesting (a valid header nests 3 deep).
  std::vector<std::set<std::string>> keys;  // one set per open object
  json header;
  try {
    json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
      if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth > 8)
        throw HeaderViolation{"JSON nested too deeply"};
      if (event == json::parse_event_t::object_start) keys.emplace_back();
      if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      if (event == json::parse_event_t::key && !keys.empty()) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(key).second) throw HeaderViolation{"duplicate key '" + key + "'"};
      }
      return true;
    };
    header = json::parse(hbegin, hbegin + n, cb);
  } catch (const HeaderViolation& v) {
    ZT_THROW_INPUT(p, ": invalid safetensors header: ", v.message);
  } catch (const json::exception& e) {
    ZT_THROW_INPUT(p, ": safetensors header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object())
    ZT_THROW_INPUT(p, ": safetensors header must be a JSON object (got ", header.type_name(), ")");

  std::vector<const TensorInfo*> by_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) ZT_THROW_INPUT(p, ": '__metadata__' must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          ZT_THROW_INPUT(p, ": '__metadata__' value for '", m.key(), "' must be a string (got ", m.value().type_name(),
                         ")");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) -> void { ZT_THROW_INPUT(p, ": tensor '", name, "': ", what); };
    if (!v.is_object()) bad(str("entry must be an object (got ", v.type_name(), ")"));
    TensorInfo info;
    info.name = name;
    // dtype
    auto d = v.find("dtype");
    if (d == v.end() || !d->is_string()) bad("missing or non-string 'dtype'");
    info.dtype_name = d->get<std::string>();
    const DtypeEntry* de = find_dtype(info.dtype_name);
    if (!de) bad(str("unknown dtype '", info.dtype_name, "'"));
    info.supported = de->supported;
    info.dtype = de->dtype;
    // shape
    auto s = v.find("shape");
    if (s == v.end() || !s->is_array()) bad("missing or non-array 'shape'");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& dim : *s) {
      uint64_t x = 0;
      if (!as_u64(dim, x) || x > static_cast<uint64_t>(INT64_MAX))
        bad(str("shape ", s->dump(), " must hold non-negative integers"));
      info.shape.push_back(static_cast<int64_t>(x));
      if (__builtin_mul_overflow(numel, x, &numel)) overflow = true;
    }
    uint64_t bits = 0;
    if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(de->bits), &bits))
      bad(str("shape ", s->dump(), " is too large"));
    if (bits % 8 != 0) bad(str("shape ", s->dump(), " of ", info.dtype_name, " does not fill whole bytes"));
    const uint64_t nbytes = bits / 8;
    // data_offsets
    auto o = v.find("data_offsets");
    if (o == v.end() || !o->is_array() || o->size() != 2 || !as_u64((*o)[0], info.begin) || !as_u64((*o)[1], info.end))
      bad("'data_offsets' must be [begin, end] with non-negative integers");
    if (info.end < info.begin) bad(str("data_offsets [", info.begin, ", ", info.end, "] end before begin"));
    if (info.end - info.begin != nbytes)
      bad(str("data_offsets [", info.begin, ", ", info.end, "] hold ", info.end - info.begin, " bytes, but ",
              info.dtype_name, " ", shape_str(info.shape), " needs ", nbytes));
    if (info.end > data_size)
      bad(str("data_offsets [", info.begin, ", ", info.end, "] run past the data region (", data_size,
              " bytes): the file is truncated or corrupt"));
    auto [pos, inserted] = infos_.emplace(name, std::move(info));
    (void)inserted;
    by_offset.push_back(&pos->second);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  // The data region must be tiled exactly, as the reference reader requires: tensors in
  // offset order, each starting where the previous one ends, the last ending at the end of
  // the file. A gap or trailing bytes mean a corrupt or hand-edited file (PyPI safetensors
  // refuses it with InvalidOffset / MetadataIncompleteBuffer), so refuse it here too.
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->begin < covered)
      ZT_THROW_INPUT(p, ": tensors '", prev->name, "' [", prev->begin, ", ", prev->end, ") and '", t->name, "' [",
                     t->begin, ", ", t->end, ") overlap in the data region");
    if (t->begin > covered)
      ZT_THROW_INPUT(p, ": tensor '", t->name, "' starts at data byte ", t->begin, " but ",
                     prev ? str("tensor '", prev->name, "' ends at ", covered) : std::string("the data starts at 0"),
                     ": a gap of ", t->begin - covered, " bytes (corrupt file; safetensors data must be contiguous)");
    covered = t->end;
    prev = t;
  }
  if (covered != data_size)
    ZT_THROW_INPUT(p, ": the tensors cover ", covered, " bytes of data but the file holds ", data_size,
                   " bytes after the header: ", data_size - covered,
                   " trailing bytes (corrupt file, or a header that does not describe all the data)");
  names_.reserve(infos_.size());
  for (const auto& kv : infos_) names_.push_back(kv.first);
}

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) ZT_THROW_INPUT(path(), ": no tensor named '", name, "'");
  return it->second;
}

const uint8_t* SafetensorsReader::bytes(const std::string& name) const {
  const TensorInfo& i = info(name);
  return file_.data() + data_offset() + i.begin;
}

Tensor SafetensorsReader::tensor(const std::string& name) const {
  const TensorInfo& i = info(name);
  if (!i.supported)
    ZT_THROW_UNSUPPORTED(path(), ": tensor '", name, "' has dtype ", i.dtype_name,
                         ", which zerotrain does not support (supported: F32, BF16, F16, I32, I64)");
  return Tensor(const_cast<uint8_t*>(bytes(name)), i.shape, i.dtype, Device::cpu(), name);
}

void SafetensorsReader::read_window(const std::string& name, int64_t row_begin, int64_t rows, int64_t col_begin,
                                    int64_t cols, void* dst, DType dst_dtype, int64_t dst_ld) const {
  const Tensor t = tensor(name);  // Unsupported for F64, I8, ...
  if (t.dim() != 1 && t.dim() != 2)
    ZT_THROW_INPUT(path(), ": tensor '", name, "' has shape ", shape_str(t.shape()), "; a window needs 1 or 2 dims");
  const int64_t R = t.size(0), C = t.dim() == 2 ? t.size(1) : 1;
  if (row_begin < 0 || rows < 0 || row_begin + rows > R || col_begin < 0 || cols < 0 || col_begin + cols > C)
    ZT_THROW_INPUT(path(), ": tensor '", name, "' of shape ", shape_str(t.shape()), " has no rows [", row_begin, ", ",
                   row_begin + rows, ") x columns [", col_begin, ", ", col_begin + cols,
                   "): the file does not match the model's config");
  const size_t es = dtype_size(t.dtype()), ds = dtype_size(dst_dtype);
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* out = static_cast<uint8_t*>(dst);
  if (cols == C && dst_ld == C) {  // whole rows, packed: one contiguous range
    convert(src + static_cast<size_t>(row_begin * C) * es, t.dtype(), out, dst_dtype, static_cast<size_t>(rows * C));
    return;
  }
  for (int64_t i = 0; i < rows; ++i)
    convert(src + static_cast<size_t>((row_begin + i) * C + col_begin) * es, t.dtype(),
            out + static_cast<size_t>(i * dst_ld) * ds, dst_dtype, static_cast<size_t>(cols));
}

// ---- writer -----------------------------------------------------------------------

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::F8E4M3:
      return "F8_E4M3";
    case DType::F8E5M2:
      return "F8_E5M2";
  }
  return "?";
}

void write_safetensors(const std::string& path, const std::vector<TensorSource>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty()) ZT_THROW_INPUT(path, ": cannot write a tensor with an empty name");
    if (t.name == "__metadata__") ZT_THROW_INPUT(path, ": '__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(t.name).second) ZT_THROW_INPUT(path, ": tensor '", t.name, "' is given twice");
    for (int64_t s : t.shape)
      if (s < 0) ZT_THROW_INPUT(path, ": tensor '", t.name, "' has a negative dimension ", shape_str(t.shape));
    ZT_CHECK(t.fill, "tensor '", t.name, "' has no fill function");
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = write_rank(tensors[a].dtype), rb = write_rank(tensors[b].dtype);
    return ra != rb ? ra > rb : tensors[a].name < tensors[b].name;
  });

  // Header: __metadata__ first, then tensors in data order, fields as the reference orders them.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& kv : metadata) m[kv.first] = kv.second;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  size_t max_bytes = 0;
  for (size_t i : order) {
    const TensorSource& t = tensors[i];
    const size_t nbytes = static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    max_bytes = std::max(max_bytes, nbytes);
    header[t.name] = {
        {"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    ZT_THROW_INPUT(path, ": tensor names and metadata must be valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  write_file_atomic(path, [&](std::FILE* f) {
    uint8_t len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    auto put = [&](const void* p, size_t bytes) {
      if (bytes && std::fwrite(p, 1, bytes, f) != bytes) ZT_THROW_IO(path, ": write failed (", errno_text(), ")");
    };
    put(len, 8);
    put(text.data(), text.size());
    // Two buffers: one tensor is written while the next is filled (for a GPU model, its
    // copy to the host), so the file's writes and the copies overlap. One write is in
    // flight at a time, so the file sees the tensors in order.
    Buffer scratch[2] = {Buffer(max_bytes), Buffer(max_bytes)};
    std::future<void> writing;
    int next = 0;
    for (size_t i : order) {
      const TensorSource& t = tensors[i];
      const size_t nbytes = static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
      if (nbytes == 0) continue;
      void* buf = scratch[next].data();
      t.fill(buf);  // this buffer's last write was waited for before the previous launch
      if (writing.valid()) writing.get();
      writing = std::async(std::launch::async, [&put, buf, nbytes] { put(buf, nbytes); });
      next ^= 1;
    }
    if (writing.valid()) writing.get();
  });
}

namespace {
// Copies a host tensor with any strides into contiguous bytes of the same dtype.
void copy_contiguous(const Tensor& src, void* dst) {
  const size_t es = dtype_size(src.dtype());
  if (src.is_contiguous()) {
    std::memcpy(dst, src.data(), src.nbytes());
    return;
  }
  const int64_t n = src.numel();
  const Shape& shape = src.shape();
  const Shape& strides = src.strides();
  std::vector<int64_t> idx(shape.size(), 0);
  const char* base = static_cast<const char*>(src.data());
  char* out = static_cast<char*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
    std::memcpy(out + static_cast<size_t>(i) * es, base + off * static_cast<int64_t>(es), es);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSource> sources;
  sources.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    ZT_CHECK(t.device().is_cpu(), "save_safetensors: tensor '", name, "' is not on the host");
    ZT_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    Tensor view = t;
    sources.push_back({name, t.dtype(), t.shape(), [view](void* dst) { copy_contiguous(view, dst); }});
  }
  write_safetensors(path, sources, metadata);
}

}  // namespace zt::io
