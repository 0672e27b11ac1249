// main() for fuzz targets built without libFuzzer: replays the target's seeds and any
// corpus files or directories given, then mutates them at random for a bounded time.
//
//   <target> [--seconds S] [--seed N] [CORPUS_FILE_OR_DIR ...]
//
// A crash (or abort from the target) ends the process non-zero; the input that caused it
// is written to ./crash-<target>-<n> first, so it can be replayed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fuzz_driver.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One random edit of the kinds that break parsers: bit flips, interesting bytes, JSON
// punctuation, digits, cuts, duplicated and deleted ranges, splices with another input.
void mutate(std::string& s, const std::vector<std::string>& pool, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  static const char kPunct[] = "{}[]\":,-0123456789eE.\\ ";
  static const uint8_t kBytes[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe};
  switch (rng() % 9) {
    case 0:
      if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 1:
      if (!s.empty()) s[pick(s.size())] = static_cast<char>(kBytes[rng() % sizeof kBytes]);
      break;
    case 2:
      if (!s.empty()) s[pick(s.size())] = kPunct[rng() % (sizeof kPunct - 1)];
      break;
    case 3:
      s.resize(pick(s.size() + 1));
      break;
    case 4: {
      const size_t a = pick(s.size() + 1), n = pick(std::min<size_t>(64, s.size() - a + 1));
      s.erase(a, n);
      break;
    }
    case 5: {
      const size_t a = pick(s.size() + 1), n = pick(std::min<size_t>(64, s.size() - a + 1));
      s.insert(pick(s.size() + 1), s.substr(a, n));
      break;
    }
    case 6: {
      const std::string& o = pool[pick(pool.size())];
      const size_t cut = pick(s.size() + 1), from = pick(o.size() + 1);
      s = s.substr(0, cut) + o.substr(from);
      break;
    }
    case 7: {  // a large number where a digit was
      const size_t p = s.find_first_of("0123456789", pick(s.size() + 1));
      if (p != std::string::npos) s.insert(p, std::to_string(rng()));
      break;
    }
    default:
      if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  std::vector<std::string> pool;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (fs::is_directory(a)) {
      for (const auto& e : fs::directory_iterator(a))
        if (e.is_regular_file()) pool.push_back(read_file(e.path()));
    } else if (fs::is_regular_file(a)) {
      pool.push_back(read_file(a));
    } else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--seed N] [CORPUS_FILE_OR_DIR ...]\n", argv[0]);
      return 2;
    }
  }
  for (auto& s : zt::fuzz::seeds()) pool.push_back(std::move(s));
  const std::string crash = "crash-" + fs::path(argv[0]).filename().string();
  auto run_one = [&](const std::string& input) {
    {  // saved before running: if the target crashes, the input is on disk
      std::ofstream out(crash, std::ios::binary);
      out << input;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  };
  for (const auto& s : pool) run_one(s);
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  uint64_t runs = pool.size();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    std::string s = pool[rng() % pool.size()];
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) mutate(s, pool, rng);
    run_one(s);
    ++runs;
  }
  std::remove(crash.c_str());
  std::printf("%s: %llu inputs in %.1f s, no crash\n", argv[0], static_cast<unsigned long long>(runs), seconds);
  return 0;
}
