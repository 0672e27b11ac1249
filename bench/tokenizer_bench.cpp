// Tokenizer throughput: encode MB/s with GPT-2's vocabulary on a ~10 MB synthetic corpus
// (the repo's licence text, shuffled by line, mixed with code, numbers and Unicode),
// single-threaded and over documents with OpenMP; next to PyPI tokenizers' encode_batch
// measured in the same run (1 thread and all threads) when its Python is there.
//
// usage: tokenizer_bench [MB=10] [VOCAB_DIR=tests/data/gpt2]
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/byte_tokenizer.h"
#include "io/tokenizer.h"

namespace {

std::vector<std::string> make_corpus(size_t bytes) {
  const std::string text = zt::io::read_text_file(std::string(ZT_SOURCE_DIR) + "/data/text/gpl-3.txt");
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l + "\n");
  const std::vector<std::string> extra = {"    for (int i = 0; i < n; ++i) { acc += x[i] * w[i]; }\n",
                                          "loss=2.3456 lr=3e-4 step 123456 tokens/s 98765.4\n",
                                          "Straße café naïve Ωμέγα данные 日本語のテキスト 中文 한국어 🎉🚀\n",
                                          "\t\tdef f(self, x):  return x ** 2   # comment\n"};
  std::mt19937_64 rng(42);
  std::vector<std::string> docs;
  std::string doc;
  size_t total = 0;
  while (total < bytes) {
    const std::string& l = rng() % 8 == 0 ? extra[rng() % extra.size()] : lines[rng() % lines.size()];
    doc += l;
    total += l.size();
    if (doc.size() > 4096) docs.push_back(std::move(doc)), doc.clear();
  }
  if (!doc.empty()) docs.push_back(doc);
  return docs;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// MB/s of PyPI tokenizers' encode_batch on the same documents, or -1.
double python_mb_s(const std::string& vocab_dir, const std::string& corpus, int threads) {
  const char* env = std::getenv("ZT_PYTHON3");
  const std::string py = env ? env : std::string(ZT_SOURCE_DIR) + "/.venv/bin/python3";
  const std::string cmd = py + " " + ZT_SOURCE_DIR + "/tools/tokenizer_oracle.py bench " + vocab_dir + " " + corpus +
                          " " + std::to_string(threads) + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  double v = -1;
  if (std::fscanf(p, "%lf", &v) != 1) v = -1;
  return ::pclose(p) == 0 ? v : -1;
}

}  // namespace

int main(int argc, char** argv) {
  const double mb = argc > 1 ? std::atof(argv[1]) : 10.0;
  const std::string vocab_dir = argc > 2 ? argv[2] : std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2";
  const auto docs = make_corpus(static_cast<size_t>(mb * 1e6));
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  const int threads = omp_get_max_threads();

  double st = 0, mt = 0;
  size_t n_tokens = 0;
  {
    // A fresh tokenizer per run: its word cache starts cold, as in a real job.
    const auto tok = zt::io::load_tokenizer(vocab_dir);
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& d : docs) n_tokens += tok->encode(d).size();
    st = bytes / seconds_since(t0) / 1e6;
  }
  {
    const auto tok = zt::io::load_tokenizer(vocab_dir);
    std::vector<size_t> counts(docs.size());
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 4)
    for (size_t i = 0; i < docs.size(); ++i) counts[i] = tok->encode(docs[i]).size();
    mt = bytes / seconds_since(t0) / 1e6;
  }
  std::printf("corpus: %.1f MB in %zu documents, %zu GPT-2 tokens (%.2f bytes/token)\n", bytes / 1e6, docs.size(),
              n_tokens, static_cast<double>(bytes) / n_tokens);
  std::printf("zerotrain encode: %.1f MB/s on 1 thread, %.1f MB/s on %d threads\n", st, mt, threads);

  char tmpl[] = "/tmp/zt_tokenizer_bench_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return 0;
  ::close(fd);
  {
    std::ofstream out(tmpl, std::ios::binary);
    for (const auto& d : docs) out << d.size() << "\n" << d;
  }
  const double py1 = python_mb_s(vocab_dir, tmpl, 1), pyn = python_mb_s(vocab_dir, tmpl, threads);
  ::unlink(tmpl);
  if (py1 > 0 && pyn > 0) {
    std::printf("PyPI tokenizers encode_batch: %.1f MB/s on 1 thread, %.1f MB/s on %d threads\n", py1, pyn, threads);
    std::printf("ratio zerotrain / tokenizers: %.2fx (1 thread), %.2fx (%d threads)\n", st / py1, mt / pyn, threads);
  } else {
    std::printf("PyPI tokenizers not available: no comparison (scripts/install_deps.sh sets it up)\n");
  }
  return 0;
}
