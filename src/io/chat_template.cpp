// A small, safe interpreter of the Jinja subset chat templates use (io/chat_template.h).
// The template is parsed once into statements and expressions; rendering walks them with
// JSON values (nlohmann::json) plus an "undefined" flag, as jinja2's lenient Undefined:
// it prints as "", is false, and fails in arithmetic. Nothing outside the subset runs.
//
// Templates are untrusted (they ship with models): the parser bounds nesting, and a render
// counts its steps, the bytes it builds and its output against ChatTemplateLimits. Values
// are shared, immutable JSON trees, so naming a variable or indexing into one copies
// nothing; only operations that build new values (and are charged for it) allocate.
#include "io/chat_template.h"

#include <string.h>  // memmem: linear-time substring search (glibc's two-way algorithm)

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt::io {

namespace {

using json = nlohmann::json;

const std::shared_ptr<const json>& null_json() {
  static const std::shared_ptr<const json> n = std::make_shared<json>();
  return n;
}

// A value of a render: an immutable JSON tree shared by every variable that holds it; a
// member or item of a value (`m['content']`, `messages[0]`) points into its parent's tree.
struct Value {
  std::shared_ptr<const json> p = null_json();
  bool undefined = false;
  Value() = default;
  Value(json v) : p(std::make_shared<json>(std::move(v))) {}  // NOLINT: Value{x} for any JSON value
  static Value shared(std::shared_ptr<const json> ptr) {
    Value v;
    v.p = std::move(ptr);
    return v;
  }
  const json& j() const { return *p; }
  static Value undef() {
    Value v;
    v.undefined = true;
    return v;
  }
  // `child` (a node of this value's tree) as a value sharing the tree.
  Value sub(const json& child) const { return shared(std::shared_ptr<const json>(p, &child)); }
};

// The first occurrence of `needle` in `hay` at or after `from` (npos if none), in time
// linear in their lengths whatever they hold (std::string::find is quadratic at worst).
size_t find_sub(const std::string& hay, const std::string& needle, size_t from = 0) {
  if (from > hay.size()) return std::string::npos;
  if (needle.empty()) return from;
  const void* f = ::memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return f ? static_cast<size_t>(static_cast<const char*>(f) - hay.data()) : std::string::npos;
}

// ---- lexing the template into text and tags ---------------------------------------

enum class SegKind { Text, Expr, Stmt, Comment };
struct Segment {
  SegKind kind;
  std::string text;
  bool strip_before = false, strip_after = false;  // `{%-` / `-%}`
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::vector<Segment> split_template(const std::string& src, const std::string& origin) {
  std::vector<Segment> out;
  size_t i = 0;
  while (i < src.size()) {
    size_t open = std::string::npos;
    for (size_t k = i; k + 1 < src.size(); ++k)
      if (src[k] == '{' && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#')) {
        open = k;
        break;
      }
    if (open == std::string::npos) {
      out.push_back({SegKind::Text, src.substr(i)});
      break;
    }
    if (open > i) out.push_back({SegKind::Text, src.substr(i, open - i)});
    const char kind = src[open + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = src.find(close, open + 2);
    if (end == std::string::npos)
      ZT_THROW_INPUT(origin, ": unclosed '{", kind, "' at offset ", open, " (no '", close, "')");
    std::string body = src.substr(open + 2, end - open - 2);
    Segment s{kind == '{' ? SegKind::Expr : kind == '%' ? SegKind::Stmt : SegKind::Comment, ""};
    if (!body.empty() && body.front() == '-') s.strip_before = true, body.erase(0, 1);
    if (!body.empty() && body.back() == '-') s.strip_after = true, body.pop_back();
    if (!body.empty() && (body.front() == '+' || body.back() == '+'))
      ZT_THROW_INPUT(origin, ": unsupported chat template construct '{", kind, "+' (whitespace control with +)");
    s.text = body;
    out.push_back(std::move(s));
    i = end + 2;
  }
  // Whitespace rules: `-` strips all whitespace on that side; block and comment tags also
  // follow trim_blocks (the newline after the tag goes) and lstrip_blocks (spaces and tabs
  // from the line's start to the tag go), as transformers' jinja2 environment sets them.
  for (size_t k = 0; k < out.size(); ++k) {
    Segment& s = out[k];
    if (s.kind == SegKind::Text) continue;
    const bool block = s.kind != SegKind::Expr;
    if (k > 0 && out[k - 1].kind == SegKind::Text) {
      std::string& t = out[k - 1].text;
      if (s.strip_before) {
        while (!t.empty() && is_space(t.back())) t.pop_back();
      } else if (block) {
        const size_t nl = t.find_last_of('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        const bool at_line_start = nl != std::string::npos || k - 1 == 0;
        if (at_line_start && t.find_first_not_of(" \t", from) == std::string::npos) t.erase(from);
      }
    }
    if (k + 1 < out.size() && out[k + 1].kind == SegKind::Text) {
      std::string& t = out[k + 1].text;
      if (s.strip_after) {
        size_t n = 0;
        while (n < t.size() && is_space(t[n])) ++n;
        t.erase(0, n);
      } else if (block) {
        if (t.rfind("\n", 0) == 0)
          t.erase(0, 1);
        else if (t.rfind("\r\n", 0) == 0)
          t.erase(0, 2);
      }
    }
  }
  return out;
}

// ---- expression tokens ------------------------------------------------------------

enum class Tok { Name, String, Int, Float, Op, End };
struct Token {
  Tok kind;
  std::string text;
};

std::vector<Token> lex_expr(const std::string& s, const std::string& origin) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      out.push_back({is_float ? Tok::Float : Tok::Int, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n':
            v += '\n';
            break;
          case 't':
            v += '\t';
            break;
          case 'r':
            v += '\r';
            break;
          case '\\':
            v += '\\';
            break;
          case '\'':
            v += '\'';
            break;
          case '"':
            v += '"';
            break;
          default:
            v += '\\', v += e;  // Python keeps unknown escapes as they are
        }
      }
      if (j >= s.size()) ZT_THROW_INPUT(origin, ": unterminated string literal in '", s, "'");
      out.push_back({Tok::String, v});
      i = j + 1;
    } else {
      static const char* kTwo[] = {"==", "!=", "<=", ">=", "//", "**"};
      std::string op(1, c);
      for (const char* t : kTwo)
        if (s.compare(i, 2, t) == 0) op = t;
      if (op == "**") ZT_THROW_INPUT(origin, ": unsupported chat template construct '**'");
      if (std::string("=<>+-*/%~|.,:()[]{}!").find(c) == std::string::npos || op == "!")
        ZT_THROW_INPUT(origin, ": unsupported character '", c, "' in chat template expression '", s, "'");
      out.push_back({Tok::Op, op});
      i += op.size();
    }
  }
  out.push_back({Tok::End, ""});
  return out;
}

// ---- expressions ------------------------------------------------------------------

enum class NK {
  Literal,
  Name,
  Attr,
  Index,
  Slice,
  Call,
  Method,
  Filter,
  Test,
  Unary,
  Binary,
  And,
  Or,
  Not,
  Ternary,
  List,
  Dict
};
struct Node {
  NK kind;
  std::string name;                    // Name, Attr, Method, Filter, Test, Unary/Binary operator
  std::shared_ptr<const json> shared;  // Literal: its value
  bool negate = false;                 // Test: `is not`
  int height = 1;                      // of the tree under this node: the render recurses this deep
  std::vector<std::unique_ptr<Node>> kids;
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> kwargs;  // calls
};
using NodePtr = std::unique_ptr<Node>;

NodePtr make(NK k, std::string name = "") {
  auto n = std::make_unique<Node>();
  n->kind = k;
  n->name = std::move(name);
  return n;
}

const char* const kFilters[] = {"trim",  "length", "count",  "upper", "lower", "capitalize", "default", "d",
                                "first", "last",   "string", "int",   "join",  "reverse",    "list",    "safe"};
const char* const kTests[] = {"defined",  "undefined", "none",    "string", "number", "integer", "mapping",
                              "iterable", "sequence",  "boolean", "true",   "false",  "even",    "odd"};
const char* const kMethods[] = {"strip",   "lstrip", "rstrip", "startswith", "endswith", "upper", "lower",
                                "replace", "split",  "items",  "keys",       "values",   "get",   "title"};
const char* const kFunctions[] = {"raise_exception", "namespace", "range"};

template <size_t N>
bool known(const char* const (&list)[N], const std::string& s) {
  return std::find_if(std::begin(list), std::end(list), [&](const char* n) { return s == n; }) != std::end(list);
}

class ExprParser {
 public:
  // `base`: how deep the tag sits in blocks; an expression may nest `max_depth - base` more.
  ExprParser(std::vector<Token> toks, std::string origin, std::string source, int base, int max_depth)
      : t_(std::move(toks)),
        origin_(std::move(origin)),
        source_(std::move(source)),
        base_(base),
        max_depth_(max_depth) {}

  NodePtr parse() { return ternary(); }
  NodePtr parse_no_ternary_if() { return or_expr(); }  // `for x in xs if cond`
  bool at_end() const { return t_[p_].kind == Tok::End; }
  const Token& peek() const { return t_[p_]; }
  bool accept_op(const std::string& op) {
    if (t_[p_].kind == Tok::Op && t_[p_].text == op) return ++p_, true;
    return false;
  }
  bool accept_name(const std::string& n) {
    if (t_[p_].kind == Tok::Name && t_[p_].text == n) return ++p_, true;
    return false;
  }
  std::string expect_name() {
    if (t_[p_].kind != Tok::Name) fail("a name");
    return t_[p_++].text;
  }
  void expect_op(const std::string& op) {
    if (!accept_op(op)) fail("'" + op + "'");
  }
  [[noreturn]] void fail(const std::string& wanted) const {
    ZT_THROW_INPUT(origin_, ": cannot read the chat template expression '", source_, "': expected ", wanted, " at '",
                   t_[p_].kind == Tok::End ? std::string("end") : t_[p_].text,
                   "' (zerotrain reads the Jinja subset listed in docs/formats.md)");
  }
  [[noreturn]] void too_deep() const {
    ZT_THROW_INPUT(origin_, ": the chat template nests deeper than ", max_depth_,
                   " levels (blocks, brackets and operators together) in '", source_.substr(0, 80),
                   source_.size() > 80 ? "...'" : "'", "; model templates nest a few levels: flatten it");
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    ZT_THROW_INPUT(origin_, ": unsupported chat template construct ", what, " in '", source_,
                   "' (zerotrain reads the Jinja subset listed in docs/formats.md; pass a template it reads with "
                   "--chat-template FILE or a built-in name: ",
                   builtin_chat_template_names(), ")");
  }

 private:
  // Every recursion of the parser passes through ternary(), not_expr() or unary(): a guard
  // there bounds it (5,000 nested brackets must be an error, not a stack overflow).
  struct Nest {
    ExprParser& p;
    explicit Nest(ExprParser& q) : p(q) {
      if (p.base_ + ++p.active_ > p.max_depth_) p.too_deep();
    }
    ~Nest() { --p.active_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };
  // Adds a child; the tree's height (a chain `a + b + ...` is built by a loop, not by
  // recursion) counts against the same limit, as the render recurses over it.
  void adopt(Node& n, NodePtr kid) {
    if (kid) grow(n, kid->height);
    n.kids.push_back(std::move(kid));
  }
  void grow(Node& n, int kid_height) {
    n.height = std::max(n.height, kid_height + 1);
    if (base_ + n.height > max_depth_) too_deep();
  }

  NodePtr ternary() {
    Nest nest(*this);
    NodePtr a = or_expr();
    if (accept_name("if")) {
      auto n = make(NK::Ternary);
      NodePtr cond = or_expr();
      NodePtr other = accept_name("else") ? ternary() : nullptr;
      adopt(*n, std::move(a));
      adopt(*n, std::move(cond));
      adopt(*n, std::move(other));
      return n;
    }
    return a;
  }
  NodePtr or_expr() {
    NodePtr a = and_expr();
    while (accept_name("or")) a = binary(NK::Or, "", std::move(a), and_expr());
    return a;
  }
  NodePtr and_expr() {
    NodePtr a = not_expr();
    while (accept_name("and")) a = binary(NK::And, "", std::move(a), not_expr());
    return a;
  }
  NodePtr not_expr() {
    if (accept_name("not")) {
      Nest nest(*this);
      auto n = make(NK::Not);
      adopt(*n, not_expr());
      return n;
    }
    return compare();
  }
  NodePtr compare() {
    NodePtr a = concat();
    for (;;) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">"})
        if (accept_op(o)) {
          op = o;
          break;
        }
      if (op.empty()) {
        if (accept_name("in"))
          op = "in";
        else if (t_[p_].kind == Tok::Name && t_[p_].text == "not" && t_[p_ + 1].kind == Tok::Name &&
                 t_[p_ + 1].text == "in")
          p_ += 2, op = "not in";
      }
      if (op.empty()) return a;
      a = binary(NK::Binary, op, std::move(a), concat());
    }
  }
  NodePtr concat() {
    NodePtr a = additive();
    while (accept_op("~")) a = binary(NK::Binary, "~", std::move(a), additive());
    return a;
  }
  NodePtr additive() {
    NodePtr a = multiplicative();
    for (;;) {
      if (accept_op("+"))
        a = binary(NK::Binary, "+", std::move(a), multiplicative());
      else if (accept_op("-"))
        a = binary(NK::Binary, "-", std::move(a), multiplicative());
      else
        return a;
    }
  }
  NodePtr multiplicative() {
    NodePtr a = unary();
    for (;;) {
      std::string op;
      for (const char* o : {"//", "*", "/", "%"})
        if (accept_op(o)) {
          op = o;
          break;
        }
      if (op.empty()) return a;
      a = binary(NK::Binary, op, std::move(a), unary());
    }
  }
  NodePtr unary() {
    if (accept_op("-")) {
      Nest nest(*this);
      auto n = make(NK::Unary, "-");
      adopt(*n, unary());
      return n;
    }
    return filtered(postfix(primary()));
  }
  // Filters and tests bind tighter than every binary operator (jinja2's parse_filter_expr).
  NodePtr filtered(NodePtr a) {
    for (;;) {
      if (accept_op("|")) {
        const std::string f = expect_name();
        if (!known(kFilters, f)) unsupported("filter '" + f + "'");
        auto n = make(NK::Filter, f);
        adopt(*n, std::move(a));
        if (accept_op("(")) call_args(*n);
        a = std::move(n);
      } else if (accept_name("is")) {
        const bool neg = accept_name("not");
        std::string test = t_[p_].kind == Tok::Name ? t_[p_].text : "";
        if (test == "none" || test == "None" || test == "true" || test == "True" || test == "false" ||
            test == "False") {
          std::transform(test.begin(), test.end(), test.begin(), [](unsigned char c) { return std::tolower(c); });
          ++p_;
        } else {
          test = expect_name();
        }
        if (!known(kTests, test)) unsupported("test 'is " + test + "'");
        auto n = make(NK::Test, test);
        n->negate = neg;
        adopt(*n, std::move(a));
        a = std::move(n);
      } else {
        return a;
      }
    }
  }
  NodePtr postfix(NodePtr a) {
    for (;;) {
      if (accept_op(".")) {
        const std::string attr = expect_name();
        if (t_[p_].kind == Tok::Op && t_[p_].text == "(") {
          ++p_;
          if (!known(kMethods, attr)) unsupported("method '." + attr + "()'");
          auto n = make(NK::Method, attr);
          adopt(*n, std::move(a));
          call_args(*n);
          a = std::move(n);
        } else {
          auto n = make(NK::Attr, attr);
          adopt(*n, std::move(a));
          a = std::move(n);
        }
      } else if (accept_op("[")) {
        NodePtr parts[3];
        int colons = 0;
        for (;;) {
          if (t_[p_].kind == Tok::Op && (t_[p_].text == ":" || t_[p_].text == "]")) {
            if (accept_op("]")) break;
            expect_op(":");
            if (++colons > 2) fail("']'");
            continue;
          }
          if (parts[colons]) fail("':' or ']'");
          parts[colons] = ternary();
        }
        if (colons == 0) {
          if (!parts[0]) fail("an index");
          auto n = make(NK::Index);
          adopt(*n, std::move(a));
          adopt(*n, std::move(parts[0]));
          a = std::move(n);
        } else {
          auto n = make(NK::Slice);
          adopt(*n, std::move(a));
          for (auto& p : parts) adopt(*n, std::move(p));
          a = std::move(n);
        }
      } else if (t_[p_].kind == Tok::Op && t_[p_].text == "(") {
        if (a->kind != NK::Name) unsupported("call of an expression");
        if (!known(kFunctions, a->name)) unsupported("function '" + a->name + "()'");
        ++p_;
        auto n = make(NK::Call, a->name);
        call_args(*n);
        a = std::move(n);
      } else {
        return a;
      }
    }
  }
  // After '(': positional and keyword arguments, up to ')'.
  void call_args(Node& n) {
    if (accept_op(")")) return;
    for (;;) {
      if (t_[p_].kind == Tok::Name && t_[p_ + 1].kind == Tok::Op && t_[p_ + 1].text == "=") {
        std::string key = t_[p_].text;
        p_ += 2;
        NodePtr v = ternary();
        grow(n, v->height);
        n.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        adopt(n, ternary());
      }
      if (accept_op(")")) return;
      expect_op(",");
    }
  }
  NodePtr primary() {
    const Token& t = t_[p_];
    if (t.kind == Tok::String) {
      ++p_;
      std::string v = t.text;
      // Adjacent string literals concatenate, as in Python.
      while (t_[p_].kind == Tok::String) v += t_[p_++].text;
      return literal(std::move(v));
    }
    if (t.kind == Tok::Int || t.kind == Tok::Float) {
      ++p_;
      // Python's ints are unbounded; this interpreter's are 64-bit: a larger literal is refused.
      errno = 0;
      json v;
      if (t.kind == Tok::Int)
        v = static_cast<int64_t>(std::strtoll(t.text.c_str(), nullptr, 10));
      else
        v = std::strtod(t.text.c_str(), nullptr);
      if (errno == ERANGE) unsupported("number " + t.text + " (beyond 64-bit integers and doubles)");
      return literal(std::move(v));
    }
    if (t.kind == Tok::Name) {
      ++p_;
      if (t.text == "true" || t.text == "True") return literal(true);
      if (t.text == "false" || t.text == "False") return literal(false);
      if (t.text == "none" || t.text == "None") return literal(nullptr);
      return make(NK::Name, t.text);
    }
    if (accept_op("(")) {
      NodePtr e = ternary();
      if (accept_op(",")) unsupported("tuple");
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto n = make(NK::List);
      if (accept_op("]")) return n;
      for (;;) {
        adopt(*n, ternary());
        if (accept_op("]")) return n;
        expect_op(",");
      }
    }
    if (accept_op("{")) {
      auto n = make(NK::Dict);
      if (accept_op("}")) return n;
      for (;;) {
        adopt(*n, ternary());
        expect_op(":");
        adopt(*n, ternary());
        if (accept_op("}")) return n;
        expect_op(",");
      }
    }
    fail("a value");
  }
  // A literal's value is made once and shared by every render (never copied per use).
  static NodePtr literal(json v) {
    auto n = make(NK::Literal);
    n->shared = std::make_shared<json>(std::move(v));
    return n;
  }
  NodePtr binary(NK k, const std::string& op, NodePtr a, NodePtr b) {
    auto n = make(k, op);
    adopt(*n, std::move(a));
    adopt(*n, std::move(b));
    return n;
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  std::string origin_, source_;
  int base_ = 0, max_depth_ = 0, active_ = 0;
};

// ---- statements -------------------------------------------------------------------

struct Stmt;
using Block = std::vector<Stmt>;
enum class SK { Text, Output, If, For, Set, SetAttr };
struct Stmt {
  explicit Stmt(SK k, std::string t = {}) : kind(k), text(std::move(t)) {}
  SK kind;
  std::string text;  // Text; Set/SetAttr/For: the variable; SetAttr: text.attr
  std::string attr, var2;
  NodePtr expr;                                     // Output, Set, For (the iterable)
  NodePtr filter;                                   // For: `if` filter
  std::vector<std::pair<NodePtr, Block>> branches;  // If: (condition, body); else has a null condition
  Block body;                                       // For
};

class TemplateParser {
 public:
  TemplateParser(std::vector<Segment> segs, std::string origin, int max_depth)
      : segs_(std::move(segs)), origin_(std::move(origin)), max_depth_(max_depth) {}

  Block parse() {
    Block b = block({});
    if (pos_ < segs_.size()) ZT_THROW_INPUT(origin_, ": '{% ", segs_[pos_].text, " %}' without its opening tag");
    return b;
  }

 private:
  static std::string keyword(const std::string& s) {
    size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
    return s.substr(i, j - i);
  }
  // Statements up to one of the `enders` (left unconsumed).
  Block block(const std::vector<std::string>& enders) {
    // Blocks nest by recursion here and in the render: 5,000 nested `{% if %}` must be an
    // error, not a stack overflow.
    struct Nest {
      int& d;
      explicit Nest(int& depth) : d(++depth) {}
      ~Nest() { --d; }
      Nest(const Nest&) = delete;
      Nest& operator=(const Nest&) = delete;
    } nest(depth_);
    if (depth_ > max_depth_)
      ZT_THROW_INPUT(origin_, ": the chat template nests deeper than ", max_depth_,
                     " levels ({% if %}/{% for %} blocks inside one another); model templates nest a few: flatten it");
    Block out;
    while (pos_ < segs_.size()) {
      const Segment& s = segs_[pos_];
      if (s.kind == SegKind::Comment) {
        ++pos_;
        continue;
      }
      if (s.kind == SegKind::Text) {
        if (!s.text.empty()) out.push_back(Stmt{SK::Text, s.text});
        ++pos_;
        continue;
      }
      if (s.kind == SegKind::Expr) {
        ExprParser p(lex_expr(s.text, origin_), origin_, s.text, depth_, max_depth_);
        Stmt st{SK::Output};
        st.expr = p.parse();
        if (!p.at_end()) p.fail("the end of '{{ ... }}'");
        out.push_back(std::move(st));
        ++pos_;
        continue;
      }
      const std::string kw = keyword(s.text);
      if (std::find(enders.begin(), enders.end(), kw) != enders.end()) return out;
      if (kw == "generation" || kw == "endgeneration") {  // TRL's assistant-mask markers
        ++pos_;
        continue;
      }
      ExprParser p(lex_expr(s.text, origin_), origin_, s.text, depth_, max_depth_);
      p.expect_name();
      ++pos_;
      if (kw == "if") {
        out.push_back(parse_if(p));
      } else if (kw == "for") {
        out.push_back(parse_for(p));
      } else if (kw == "set") {
        Stmt st{SK::Set};
        st.text = p.expect_name();
        if (p.accept_op(".")) st.kind = SK::SetAttr, st.attr = p.expect_name();
        if (!p.accept_op("=")) p.unsupported("'{% set %}' block or tuple assignment");
        st.expr = p.parse();
        if (!p.at_end()) p.fail("the end of '{% set %}'");
        out.push_back(std::move(st));
      } else {
        p.unsupported("'{% " + kw + " %}'");
      }
    }
    if (!enders.empty()) ZT_THROW_INPUT(origin_, ": the template ends before '{% ", enders.back(), " %}'");
    return out;
  }
  Stmt parse_if(ExprParser& first) {
    Stmt st{SK::If};
    NodePtr cond = first.parse();
    if (!first.at_end()) first.fail("the end of '{% if %}'");
    for (;;) {
      Block body = block({"elif", "else", "endif"});
      st.branches.emplace_back(std::move(cond), std::move(body));
      const std::string kw = keyword(segs_[pos_].text);
      ExprParser p(lex_expr(segs_[pos_].text, origin_), origin_, segs_[pos_].text, depth_, max_depth_);
      p.expect_name();
      ++pos_;
      if (kw == "endif") return st;
      if (kw == "else") {
        Block e = block({"endif"});
        ++pos_;
        st.branches.emplace_back(nullptr, std::move(e));
        return st;
      }
      cond = p.parse();
      if (!p.at_end()) p.fail("the end of '{% elif %}'");
    }
  }
  Stmt parse_for(ExprParser& p) {
    Stmt st{SK::For};
    st.text = p.expect_name();
    if (p.accept_op(",")) st.var2 = p.expect_name();
    if (!p.accept_name("in")) p.fail("'in'");
    st.expr = p.parse_no_ternary_if();
    if (p.accept_name("if")) st.filter = p.parse();
    if (p.accept_name("recursive")) p.unsupported("recursive for loop");
    if (!p.at_end()) p.fail("the end of '{% for %}'");
    st.body = block({"endfor", "else"});
    if (keyword(segs_[pos_].text) == "else") p.unsupported("'{% for %}...{% else %}'");
    ++pos_;
    return st;
  }

  std::vector<Segment> segs_;
  size_t pos_ = 0;
  std::string origin_;
  int max_depth_ = 0, depth_ = 0;
};

// ---- rendering --------------------------------------------------------------------

bool truthy(const Value& v) {
  const json& j = v.j();
  if (v.undefined || j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number()) return j.get<double>() != 0;
  if (j.is_string() || j.is_array() || j.is_object()) return !j.empty();
  return false;
}

std::string type_name(const Value& v) { return v.undefined ? "undefined" : v.j().type_name(); }

// What one render may spend (ChatTemplateLimits): steps of work, bytes built, output.
// Every operation that walks or builds data is charged for it before or as it does, so a
// template can neither run nor grow without bound.
class Budget {
 public:
  Budget(const ChatTemplateLimits& limits, const std::string& origin) : l_(limits), origin_(origin) {}

  void step(int64_t n = 1) {
    steps_ += n;
    if (steps_ > l_.max_steps)
      fail(str("the chat template runs more than ", l_.max_steps,
               " steps for one conversation (loops over loops, or over ranges?); model templates take thousands"));
  }
  // Reading or comparing `bytes` of text.
  void text(size_t bytes) { step(1 + static_cast<int64_t>(bytes / 64)); }
  // A new string of `bytes` bytes, before it is built.
  void string(size_t bytes) {
    if (bytes > static_cast<uint64_t>(l_.max_output_bytes))
      fail(str("the chat template builds a string of ", bytes, " bytes; the limit is ", l_.max_output_bytes,
               " (a string doubled in a loop?)"));
    alloc(bytes);
  }
  // `n` new small items (a list of numbers or characters), before they are built.
  void items(size_t n) { alloc(n * sizeof(json)); }
  // A new list or mapping (its items copied in): walks it, charging every item and byte,
  // and bounds its nesting (values nested without bound would overflow the stack of
  // every function that walks them).
  void built(const json& j, int depth = 1) {
    if (depth > l_.max_depth)
      fail(str("the chat template nests lists or mappings deeper than ", l_.max_depth, " levels"));
    if (j.is_string()) return string(j.get_ref<const std::string&>().size());
    alloc(sizeof(json));
    if (j.is_array())
      for (const json& x : j) built(x, depth + 1);
    else if (j.is_object())
      for (auto it = j.begin(); it != j.end(); ++it) alloc(it.key().size()), built(it.value(), depth + 1);
  }
  // Only the nesting of a value that moves (its bytes were charged when it was built).
  void built_depth(const json& j, int depth) {
    if (depth > l_.max_depth)
      fail(str("the chat template nests lists or mappings deeper than ", l_.max_depth, " levels"));
    step();
    if (j.is_array())
      for (const json& x : j) built_depth(x, depth + 1);
    else if (j.is_object())
      for (auto it = j.begin(); it != j.end(); ++it) built_depth(it.value(), depth + 1);
  }
  // `add` more bytes of output (already `have`).
  void output(size_t have, size_t add) {
    if (have + add > static_cast<uint64_t>(l_.max_output_bytes))
      fail(str("the chat template's output exceeds ", l_.max_output_bytes, " bytes"));
    text(add);
  }
  int64_t max_output_bytes() const { return l_.max_output_bytes; }
  int64_t max_range() const { return l_.max_range; }
  [[noreturn]] void fail(const std::string& what) const { ZT_THROW_INPUT(origin_, ": ", what); }

 private:
  void alloc(uint64_t bytes) {
    alloc_ += bytes;
    if (alloc_ > static_cast<uint64_t>(l_.max_alloc_bytes))
      fail(str("the chat template builds more than ", l_.max_alloc_bytes,
               " bytes of strings, lists and mappings for one conversation"));
    text(bytes);
  }

  const ChatTemplateLimits& l_;
  const std::string& origin_;
  int64_t steps_ = 0;
  uint64_t alloc_ = 0;
};

// Python's str() of a value, appended to `out` (repr for the items of lists and mappings),
// within the budget's string size.
void python_str(const json& j, bool undefined, bool repr, std::string& out, Budget& b) {
  const size_t before = out.size();
  auto add = [&](const std::string& s) {
    if (out.size() - before + s.size() > static_cast<uint64_t>(b.max_output_bytes())) b.string(out.size() + s.size());
    b.text(s.size());
    out += s;
  };
  if (undefined) return;
  if (j.is_null()) return add("None");
  if (j.is_boolean()) return add(j.get<bool>() ? "True" : "False");
  if (j.is_number_integer()) return add(std::to_string(j.get<int64_t>()));
  if (j.is_number()) {
    const double d = j.get<double>();
    if (std::isnan(d)) return add("nan");
    if (std::isinf(d)) return add(d > 0 ? "inf" : "-inf");
    if (std::floor(d) == d && std::fabs(d) < 1e16) return add(std::to_string(static_cast<int64_t>(d)) + ".0");
    return add(j.dump());
  }
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (!repr) return add(s);
    std::string q = "'";
    for (char c : s) {
      if (c == '\'' || c == '\\') q += '\\';
      if (c == '\n')
        q += "\\n";
      else
        q += c;
    }
    return add(q + "'");
  }
  if (j.is_array()) {
    add("[");
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) add(", ");
      python_str(j[i], false, true, out, b);
    }
    return add("]");
  }
  add("{");
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it, first = false) {
    if (!first) add(", ");
    python_str(json(it.key()), false, true, out, b);
    add(": ");
    python_str(it.value(), false, true, out, b);
  }
  add("}");
}

std::string strip_chars(const std::string& s, bool left, bool right, const std::string& chars = " \t\n\r\f\v") {
  std::array<bool, 256> strip{};
  for (char c : chars) strip[static_cast<unsigned char>(c)] = true;
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip[static_cast<unsigned char>(s[b])]) ++b;
  if (right)
    while (e > b && strip[static_cast<unsigned char>(s[e - 1])]) --e;
  return s.substr(b, e - b);
}

class Renderer {
 public:
  Renderer(const std::string& origin, const ChatTemplateLimits& limits, std::map<std::string, Value> globals)
      : origin_(origin), budget_(limits, origin) {
    scopes_.push_back(std::move(globals));
  }

  void run(const Block& block, std::string& out) {
    for (const Stmt& s : block) {
      budget_.step();
      switch (s.kind) {
        case SK::Text:
          emit(out, s.text);
          break;
        case SK::Output: {
          const Value v = eval(*s.expr);
          if (v.j().is_string() && !v.undefined) {
            emit(out, v.j().get_ref<const std::string&>());
          } else {
            std::string t;
            python_str(v.j(), v.undefined, false, t, budget_);
            emit(out, t);
          }
          break;
        }
        case SK::If:
          for (const auto& [cond, body] : s.branches)
            if (!cond || truthy(eval(*cond))) {
              run(body, out);
              break;
            }
          break;
        case SK::Set:
          scopes_.back()[s.text] = eval(*s.expr);
          break;
        case SK::SetAttr:
          set_attr(s);
          break;
        case SK::For:
          run_for(s, out);
          break;
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { budget_.fail(what); }

  void emit(std::string& out, const std::string& s) {
    budget_.output(out.size(), s.size());
    out += s;
  }

  Value* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  // `{% set ns.attr = v %}`. The namespace is changed in place when nothing else holds its
  // tree (every value is made by make_shared<json>, so the object itself is not const),
  // else copied first, so other holders keep what they had.
  void set_attr(const Stmt& s) {
    const Value v = eval(*s.expr);
    Value* ns = lookup(s.text);
    if (!ns || !ns->j().is_object())
      fail("'{% set " + s.text + "." + s.attr + " %}' needs " + s.text + " to be a namespace()");
    // The value moves in when nothing else holds it (`ns.s = ns.s + x` builds a new one),
    // else it is copied, and the copy is charged.
    const bool sole = v.p.use_count() == 1;
    if (sole)
      budget_.built_depth(v.j(), 2);
    else
      budget_.built(v.j(), 2);
    json item = sole ? std::move(const_cast<json&>(v.j())) : v.j();
    if (ns->p.use_count() == 1) {
      const_cast<json&>(ns->j())[s.attr] = std::move(item);
      return;
    }
    json copy = ns->j();
    budget_.built(copy);
    copy[s.attr] = std::move(item);
    *ns = Value{std::move(copy)};
  }

  void run_for(const Stmt& s, std::string& out) {
    const Value seq = eval(*s.expr);
    std::vector<Value> items;
    const json& sj = seq.j();
    if (seq.undefined || sj.is_null()) {
    } else if (sj.is_array()) {
      budget_.step(static_cast<int64_t>(sj.size()));
      items.reserve(sj.size());
      for (const json& x : sj) items.push_back(seq.sub(x));
    } else if (sj.is_object()) {
      for (auto it = sj.begin(); it != sj.end(); ++it) {
        budget_.string(it.key().size());
        items.emplace_back(json(it.key()));
      }
    } else if (sj.is_string()) {
      const std::string& chars = sj.get_ref<const std::string&>();
      budget_.items(chars.size());
      for (char c : chars) items.emplace_back(json(std::string(1, c)));
    } else {
      fail("cannot loop over a " + type_name(seq));
    }
    scopes_.emplace_back();
    auto bind = [&](const Value& item) {
      if (s.var2.empty()) {
        scopes_.back()[s.text] = item;
      } else {
        const json& pair = item.j();
        if (!pair.is_array() || pair.size() != 2) fail("'for " + s.text + ", " + s.var2 + "' needs pairs");
        scopes_.back()[s.text] = item.sub(pair[0]);
        scopes_.back()[s.var2] = item.sub(pair[1]);
      }
    };
    if (s.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        bind(item);
        if (truthy(eval(*s.filter))) kept.push_back(item);
      }
      items.swap(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      budget_.step(4);
      bind(items[static_cast<size_t>(i)]);
      Value& loop = scopes_.back()["loop"];
      // `loop` is updated in place while the body kept no reference to it (the common case:
      // one mapping per loop, not one per turn).
      if (loop.p.use_count() != 1 || !loop.j().is_object()) loop = Value{json::object()};
      json& l = const_cast<json&>(loop.j());
      l["index0"] = i;
      l["index"] = i + 1;
      l["first"] = i == 0;
      l["last"] = i == n - 1;
      l["length"] = n;
      l["revindex"] = n - i;
      l["revindex0"] = n - i - 1;
      run(s.body, out);
    }
    scopes_.pop_back();
  }

  int64_t as_int(const Value& v, const char* what) const {
    if (v.j().is_number_integer()) return v.j().get<int64_t>();
    if (v.j().is_boolean()) return v.j().get<bool>() ? 1 : 0;
    fail(std::string(what) + " needs an integer, got " + type_name(v));
  }

  [[noreturn]] void overflow(const std::string& what) const {
    fail("integer overflow in " + what +
         " (Python's integers are unbounded; this interpreter's are 64-bit and refuses what they cannot hold)");
  }

  Value index(const Value& a, const Value& k) {
    const json& aj = a.j();
    if (aj.is_object()) {
      if (!k.j().is_string()) return Value::undef();
      auto it = aj.find(k.j().get_ref<const std::string&>());
      return it == aj.end() ? Value::undef() : a.sub(*it);
    }
    if ((aj.is_array() || aj.is_string()) && k.j().is_number_integer()) {
      const int64_t n = aj.is_array() ? static_cast<int64_t>(aj.size())
                                      : static_cast<int64_t>(aj.get_ref<const std::string&>().size());
      int64_t i = k.j().get<int64_t>();
      if (i < 0) i += n;  // no overflow: i < 0 <= n
      if (i < 0 || i >= n) return Value::undef();
      if (aj.is_array()) return a.sub(aj[static_cast<size_t>(i)]);
      return Value{std::string(1, aj.get_ref<const std::string&>()[static_cast<size_t>(i)])};
    }
    return Value::undef();
  }

  Value slice(const Value& a, const Node& n) {
    const json& aj = a.j();
    const bool is_str = aj.is_string();
    if (!aj.is_array() && !is_str) fail("cannot slice a " + type_name(a));
    const int64_t len =
        is_str ? static_cast<int64_t>(aj.get_ref<const std::string&>().size()) : static_cast<int64_t>(aj.size());
    const int64_t step = n.kids[3] ? as_int(eval(*n.kids[3]), "a slice step") : 1;
    if (step == 0) fail("slice step cannot be zero");
    auto bound = [&](const NodePtr& e, int64_t def) {
      if (!e) return def;
      int64_t v = as_int(eval(*e), "a slice bound");
      if (v < 0) v += len;
      return step > 0 ? std::clamp<int64_t>(v, 0, len) : std::clamp<int64_t>(v, -1, len - 1);
    };
    const int64_t b = bound(n.kids[1], step > 0 ? 0 : len - 1), e = bound(n.kids[2], step > 0 ? len : -1);
    // 128-bit index: `i += step` must not overflow for a step near the 64-bit limits.
    std::vector<size_t> picked;
    for (__int128 i = b; step > 0 ? i < e : i > e; i += step) picked.push_back(static_cast<size_t>(i));
    if (is_str) {
      budget_.string(picked.size());
      std::string out;
      out.reserve(picked.size());
      for (size_t i : picked) out += aj.get_ref<const std::string&>()[i];
      return Value{std::move(out)};
    }
    json out = json::array();
    for (size_t i : picked) out.push_back(aj[i]);
    budget_.built(out);
    return Value{std::move(out)};
  }

  // Walks two values as nlohmann's == does (numbers by value, a bool never equal to a
  // number), charging every node and byte compared.
  bool same(const json& a, const json& b) {
    budget_.step();
    if (a.is_number() && b.is_number()) {
      if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() == b.get<int64_t>();
      return a.get<double>() == b.get<double>();
    }
    if (a.type() != b.type()) return false;
    if (a.is_string()) {
      const std::string &x = a.get_ref<const std::string&>(), &y = b.get_ref<const std::string&>();
      budget_.text(std::min(x.size(), y.size()));
      return x == y;
    }
    if (a.is_array()) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!same(a[i], b[i])) return false;
      return true;
    }
    if (a.is_object()) {
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        auto f = b.find(it.key());
        if (f == b.end() || !same(it.value(), *f)) return false;
      }
      return true;
    }
    return a == b;
  }

  int compare(const Value& a, const Value& b, bool& ok) {
    ok = true;
    if (a.j().is_number() && b.j().is_number()) {
      if (a.j().is_number_integer() && b.j().is_number_integer()) {
        const int64_t x = a.j().get<int64_t>(), y = b.j().get<int64_t>();
        return x < y ? -1 : x > y ? 1 : 0;
      }
      const double x = a.j().get<double>(), y = b.j().get<double>();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.j().is_string() && b.j().is_string()) {
      const std::string &x = a.j().get_ref<const std::string&>(), &y = b.j().get_ref<const std::string&>();
      budget_.text(std::min(x.size(), y.size()));
      return x.compare(y);
    }
    ok = false;
    return 0;
  }

  bool equal(const Value& a, const Value& b) {
    if (a.undefined || b.undefined) return a.undefined && b.undefined;
    return same(a.j(), b.j());
  }

  std::string str_of(const Value& v) {
    std::string s;
    python_str(v.j(), v.undefined, false, s, budget_);
    return s;
  }

  // Integer arithmetic with Python's results (floor division and modulo take the divisor's
  // sign), refusing what 64 bits cannot hold instead of wrapping or trapping (INT64_MIN //
  // -1 raises SIGFPE on x86).
  Value int_arith(const std::string& op, int64_t x, int64_t y) {
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) overflow(str(x, " + ", y));
      return Value{r};
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) overflow(str(x, " - ", y));
      return Value{r};
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) overflow(str(x, " * ", y));
      return Value{r};
    }
    if (y == 0) fail("integer division or modulo by zero");
    if (y == -1) {  // x / -1 traps for INT64_MIN; the remainder is always 0
      if (op == "%") return Value{int64_t{0}};
      if (x == std::numeric_limits<int64_t>::min()) overflow(str(x, " // -1"));
      return Value{-x};
    }
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
    return Value{op == "//" ? q : m};
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value{equal(a, b)};
    if (op == "!=") return Value{!equal(a, b)};
    const json &aj = a.j(), &bj = b.j();
    if (op == "in" || op == "not in") {
      bool found = false;
      if (bj.is_string() && aj.is_string()) {
        const std::string &hay = bj.get_ref<const std::string&>(), &needle = aj.get_ref<const std::string&>();
        budget_.text(hay.size() + needle.size());
        found = find_sub(hay, needle) != std::string::npos;
      } else if (bj.is_array()) {
        found = std::any_of(bj.begin(), bj.end(), [&](const json& x) { return same(x, aj); });
      } else if (bj.is_object()) {
        found = aj.is_string() && bj.contains(aj.get_ref<const std::string&>());
      } else if (!b.undefined && !bj.is_null()) {
        fail("'in' needs a string, list or mapping on its right, got " + type_name(b));
      }
      return Value{op == "in" ? found : !found};
    }
    if (op == "~") {
      std::string s = str_of(a);
      const std::string t = str_of(b);
      budget_.string(s.size() + t.size());
      return Value{s + t};
    }
    if (a.undefined || b.undefined)
      fail("'" + op + "' on an undefined value (" + type_name(a) + " " + op + " " + type_name(b) + ")");
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      bool ok;
      const int c = compare(a, b, ok);
      if (!ok) fail("cannot compare " + type_name(a) + " and " + type_name(b));
      return Value{op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0};
    }
    if (op == "+") {
      if (aj.is_string() && bj.is_string()) {
        const std::string &x = aj.get_ref<const std::string&>(), &y = bj.get_ref<const std::string&>();
        budget_.string(x.size() + y.size());
        return Value{x + y};
      }
      if (aj.is_array() && bj.is_array()) {
        json r = aj;
        for (const auto& x : bj) r.push_back(x);
        budget_.built(r);
        return Value{std::move(r)};
      }
    }
    if (!aj.is_number() || !bj.is_number())
      fail("cannot apply '" + op + "' to " + type_name(a) + " and " + type_name(b));
    if (aj.is_number_integer() && bj.is_number_integer() && op != "/")
      return int_arith(op, aj.get<int64_t>(), bj.get<int64_t>());
    const double x = aj.get<double>(), y = bj.get<double>();
    if (op == "+") return Value{x + y};
    if (op == "-") return Value{x - y};
    if (op == "*") return Value{x * y};
    if (y == 0) fail("division by zero");
    if (op == "/") return Value{x / y};
    if (op == "//") return Value{std::floor(x / y)};
    return Value{x - std::floor(x / y) * y};
  }

  Value filter(const Node& n) {
    const Value a = eval(*n.kids[0]);
    std::vector<Value> args;
    for (size_t i = 1; i < n.kids.size(); ++i) args.push_back(eval(*n.kids[i]));
    const std::string& f = n.name;
    const json& aj = a.j();
    auto need_string = [&]() -> const std::string& {
      if (!aj.is_string()) fail("filter '" + f + "' needs a string, got " + type_name(a));
      budget_.string(aj.get_ref<const std::string&>().size());  // every string filter builds one this long
      return aj.get_ref<const std::string&>();
    };
    if (f == "trim") return Value{strip_chars(need_string(), true, true)};
    if (f == "upper" || f == "lower") {
      std::string s = need_string();
      for (char& c : s)
        c = static_cast<char>(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                           : std::tolower(static_cast<unsigned char>(c)));
      return Value{std::move(s)};
    }
    if (f == "capitalize") {
      std::string s = need_string();
      for (size_t i = 0; i < s.size(); ++i)
        s[i] = static_cast<char>(i ? std::tolower(static_cast<unsigned char>(s[i]))
                                   : std::toupper(static_cast<unsigned char>(s[i])));
      return Value{std::move(s)};
    }
    if (f == "length" || f == "count") {
      if (aj.is_string()) return Value{static_cast<int64_t>(aj.get_ref<const std::string&>().size())};
      if (aj.is_array() || aj.is_object()) return Value{static_cast<int64_t>(aj.size())};
      fail("filter '" + f + "' needs a string, list or mapping, got " + type_name(a));
    }
    if (f == "default" || f == "d") {
      const bool boolean = args.size() > 1 && truthy(args[1]);
      if (a.undefined || (boolean && !truthy(a))) return args.empty() ? Value{std::string()} : args[0];
      return a;
    }
    if (f == "first" || f == "last") {
      if (aj.is_array()) return aj.empty() ? Value::undef() : a.sub(f == "first" ? aj.front() : aj.back());
      if (aj.is_string()) {
        const std::string& s = aj.get_ref<const std::string&>();
        return s.empty() ? Value::undef() : Value{std::string(1, f == "first" ? s.front() : s.back())};
      }
      fail("filter '" + f + "' needs a list or string, got " + type_name(a));
    }
    if (f == "string" || f == "safe") return Value{str_of(a)};
    if (f == "int") {
      if (aj.is_number_integer()) return a;
      if (aj.is_number()) {
        const double d = aj.get<double>();
        // Python: int(inf) and int(nan) raise; a float past 2^63 is an int this one cannot hold.
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) overflow("int(" + aj.dump() + ")");
        return Value{static_cast<int64_t>(d)};
      }
      if (aj.is_string()) {
        const std::string& s = aj.get_ref<const std::string&>();
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (errno == ERANGE) overflow("int('" + s.substr(0, 40) + "')");
        return Value{end != s.c_str() ? static_cast<int64_t>(v) : int64_t{0}};
      }
      return Value{int64_t{0}};
    }
    if (f == "join") {
      if (!aj.is_array()) fail("filter 'join' needs a list, got " + type_name(a));
      const std::string sep = args.empty() ? "" : str_of(args[0]);
      std::string out;
      for (size_t i = 0; i < aj.size(); ++i) {
        if (i) {
          budget_.string(out.size() + sep.size());
          out += sep;
        }
        python_str(aj[i], false, false, out, budget_);
      }
      budget_.string(out.size());
      return Value{std::move(out)};
    }
    if (f == "reverse") {
      if (aj.is_string()) {
        std::string s = need_string();
        std::reverse(s.begin(), s.end());
        return Value{std::move(s)};
      }
      if (!aj.is_array()) fail("filter 'reverse' needs a list or string, got " + type_name(a));
      json r = json::array();
      for (auto it = aj.rbegin(); it != aj.rend(); ++it) r.push_back(*it);
      budget_.built(r);
      return Value{std::move(r)};
    }
    // list
    if (aj.is_array()) return a;
    if (aj.is_string()) {
      budget_.items(aj.get_ref<const std::string&>().size());
      json r = json::array();
      for (char c : aj.get_ref<const std::string&>()) r.push_back(std::string(1, c));
      return Value{std::move(r)};
    }
    fail("filter 'list' needs a list or string, got " + type_name(a));
  }

  Value test(const Node& n) {
    const Value a = eval(*n.kids[0]);
    const json& aj = a.j();
    const std::string& t = n.name;
    bool r = false;
    if (t == "defined")
      r = !a.undefined;
    else if (t == "undefined")
      r = a.undefined;
    else if (t == "none")
      r = !a.undefined && aj.is_null();
    else if (t == "string")
      r = aj.is_string();
    else if (t == "number")
      r = aj.is_number();
    else if (t == "integer")
      r = aj.is_number_integer();
    else if (t == "boolean")
      r = aj.is_boolean();
    else if (t == "true")
      r = aj.is_boolean() && aj.get<bool>();
    else if (t == "false")
      r = aj.is_boolean() && !aj.get<bool>();
    else if (t == "mapping")
      r = aj.is_object();
    else if (t == "iterable")
      r = aj.is_array() || aj.is_object() || aj.is_string();
    else if (t == "sequence")
      r = aj.is_array() || aj.is_string() || aj.is_object();
    else if (t == "even" || t == "odd")
      r = (as_int(a, "'is even/odd'") % 2 == 0) == (t == "even");
    return Value{n.negate ? !r : r};
  }

  Value method(const Node& n) {
    const Value a = eval(*n.kids[0]);
    std::vector<Value> args;
    for (size_t i = 1; i < n.kids.size(); ++i) args.push_back(eval(*n.kids[i]));
    const std::string& m = n.name;
    const json& aj = a.j();
    auto arg_str = [&](size_t i) -> const std::string& {
      if (i >= args.size() || !args[i].j().is_string()) fail("." + m + "() needs a string argument");
      return args[i].j().get_ref<const std::string&>();
    };
    if (aj.is_object()) {
      if (m == "items" || m == "keys" || m == "values") {
        json r = json::array();
        for (auto it = aj.begin(); it != aj.end(); ++it)
          r.push_back(m == "items" ? json::array({it.key(), it.value()}) : m == "keys" ? json(it.key()) : it.value());
        budget_.built(r);
        return Value{std::move(r)};
      }
      if (m == "get") {
        const Value v = index(a, args.empty() ? Value::undef() : args[0]);
        return v.undefined ? (args.size() > 1 ? args[1] : Value{json()}) : v;
      }
    }
    if (!aj.is_string()) fail("." + m + "() on a " + type_name(a));
    const std::string& s = aj.get_ref<const std::string&>();
    budget_.text(s.size());
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      const std::string chars = args.empty() || args[0].j().is_null() ? " \t\n\r\f\v" : arg_str(0);
      budget_.string(s.size() + chars.size());
      return Value{strip_chars(s, m != "rstrip", m != "lstrip", chars)};
    }
    if (m == "startswith") return Value{s.rfind(arg_str(0), 0) == 0};
    if (m == "endswith") {
      const std::string& x = arg_str(0);
      return Value{s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0};
    }
    if (m == "upper" || m == "lower" || m == "title") {
      budget_.string(s.size());
      std::string r = s;
      bool start = true;
      for (char& c : r) {
        const auto u = static_cast<unsigned char>(c);
        if (m == "upper")
          c = static_cast<char>(std::toupper(u));
        else if (m == "lower")
          c = static_cast<char>(std::tolower(u));
        else
          c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = !std::isalpha(u);
      }
      return Value{std::move(r)};
    }
    if (m == "replace") {
      const std::string &from = arg_str(0), &to = arg_str(1);
      if (from.empty()) fail(".replace() with an empty pattern");
      std::string r;
      size_t i = 0;
      for (size_t f; (f = find_sub(s, from, i)) != std::string::npos; i = f + from.size()) {
        budget_.string(r.size() + (f - i) + to.size());
        r.append(s, i, f - i);
        r += to;
      }
      budget_.string(r.size() + (s.size() - i));
      r.append(s, i, std::string::npos);
      return Value{std::move(r)};
    }
    if (m == "split") {
      json r = json::array();
      if (args.empty() || args[0].j().is_null()) {
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && is_space(s[i])) ++i;
          size_t j = i;
          while (j < s.size() && !is_space(s[j])) ++j;
          if (j > i) r.push_back(s.substr(i, j - i));
          i = j;
        }
      } else {
        const std::string& sep = arg_str(0);
        if (sep.empty()) fail(".split() with an empty separator");
        size_t i = 0;
        for (size_t f; (f = find_sub(s, sep, i)) != std::string::npos; i = f + sep.size()) {
          budget_.step();
          r.push_back(s.substr(i, f - i));
        }
        r.push_back(s.substr(i));
      }
      budget_.built(r);
      return Value{std::move(r)};
    }
    fail("." + m + "() on a string");
  }

  Value call(const Node& n) {
    if (n.name == "raise_exception") {
      const std::string msg = n.kids.empty() ? "" : str_of(eval(*n.kids[0]));
      fail("the chat template refused the conversation: " + msg);
    }
    if (n.name == "namespace") {
      json ns = json::object();
      for (const auto& [k, v] : n.kwargs) ns[k] = eval(*v).j();
      budget_.built(ns);
      return Value{std::move(ns)};
    }
    // range, with the length of jinja2's sandbox (transformers renders templates in one).
    std::vector<int64_t> a;
    for (const auto& k : n.kids) a.push_back(as_int(eval(*k), "range()"));
    if (a.empty() || a.size() > 3) fail("range() takes 1 to 3 integers");
    const int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0], step = a.size() > 2 ? a[2] : 1;
    if (step == 0) fail("range() step cannot be zero");
    const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
    const __int128 mag = step > 0 ? __int128{step} : -__int128{step};
    const __int128 count = span <= 0 ? 0 : (span - 1) / mag + 1;
    if (count > budget_.max_range())
      fail(str("range() of ", static_cast<long long>(std::min<__int128>(count, std::numeric_limits<int64_t>::max())),
               " numbers; the limit is ", budget_.max_range(),
               " (jinja2's sandbox MAX_RANGE, as transformers renders)"));
    budget_.items(static_cast<size_t>(count));
    json r = json::array();
    for (__int128 i = 0; i < count; ++i) r.push_back(static_cast<int64_t>(start + i * step));
    return Value{std::move(r)};
  }

  Value eval(const Node& n) {
    budget_.step();
    switch (n.kind) {
      case NK::Literal:
        return Value::shared(n.shared);
      case NK::Name: {
        const Value* v = lookup(n.name);
        return v ? *v : Value::undef();
      }
      case NK::Attr:
        return index(eval(*n.kids[0]), Value{n.name});
      case NK::Index:
        return index(eval(*n.kids[0]), eval(*n.kids[1]));
      case NK::Slice:
        return slice(eval(*n.kids[0]), n);
      case NK::Call:
        return call(n);
      case NK::Method:
        return method(n);
      case NK::Filter:
        return filter(n);
      case NK::Test:
        return test(n);
      case NK::Unary: {
        const Value a = eval(*n.kids[0]);
        if (a.j().is_number_integer()) {
          const int64_t x = a.j().get<int64_t>();
          if (x == std::numeric_limits<int64_t>::min()) overflow(str("-(", x, ")"));
          return Value{-x};
        }
        if (a.j().is_number()) return Value{-a.j().get<double>()};
        fail("unary '-' on a " + type_name(a));
      }
      case NK::Binary: {
        const Value a = eval(*n.kids[0]);
        return binary(n.name, a, eval(*n.kids[1]));
      }
      case NK::And: {
        Value a = eval(*n.kids[0]);
        return truthy(a) ? eval(*n.kids[1]) : a;
      }
      case NK::Or: {
        Value a = eval(*n.kids[0]);
        return truthy(a) ? a : eval(*n.kids[1]);
      }
      case NK::Not:
        return Value{!truthy(eval(*n.kids[0]))};
      case NK::Ternary:
        if (truthy(eval(*n.kids[1]))) return eval(*n.kids[0]);
        return n.kids[2] ? eval(*n.kids[2]) : Value::undef();
      case NK::List: {
        json r = json::array();
        for (const auto& k : n.kids) r.push_back(eval(*k).j());
        budget_.built(r);
        return Value{std::move(r)};
      }
      case NK::Dict: {
        json r = json::object();
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          const Value k = eval(*n.kids[i]);
          if (!k.j().is_string()) fail("dictionary keys must be strings");
          r[k.j().get<std::string>()] = eval(*n.kids[i + 1]).j();
        }
        budget_.built(r);
        return Value{std::move(r)};
      }
    }
    fail("internal: unknown expression");
  }

  const std::string& origin_;
  mutable Budget budget_;
  std::vector<std::map<std::string, Value>> scopes_;
};

// Built-in templates, for tokenizers without a chat_template. chatml, llama3 and mistral
// are the Qwen2-Instruct (without its default system prompt), Llama-3-Instruct and
// Mistral-7B-Instruct-v0.1 templates; alpaca is Stanford Alpaca's prompt format.
const std::map<std::string, std::string>& builtins() {
  static const std::map<std::string, std::string> m = {
      {"chatml",
       "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
       "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
      {"llama3",
       "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
       "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
       "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
       "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
       "{% endif %}"},
      {"mistral",
       "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
       "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
       "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
       "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
       "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"},
      {"alpaca",
       "{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}"
       "{% elif message['role'] == 'user' %}{% if loop.first %}{{ 'Below is an instruction that describes a task. "
       "Write a response that appropriately completes the request.\\n\\n' }}{% endif %}"
       "{{ '### Instruction:\\n' + message['content'] + '\\n\\n' }}"
       "{% elif message['role'] == 'assistant' %}{{ '### Response:\\n' + message['content'] + eos_token }}"
       "{% if not loop.last %}{{ '\\n\\n' }}{% endif %}"
       "{% else %}{{ raise_exception('alpaca: unknown role ' + message['role']) }}{% endif %}{% endfor %}"
       "{% if add_generation_prompt %}{{ '### Response:\\n' }}{% endif %}"},
  };
  return m;
}

}  // namespace

struct ChatTemplate::Impl {
  std::string origin;
  ChatTemplateLimits limits;
  Block program;
};

ChatTemplate::ChatTemplate(const std::string& source, std::string origin, ChatTemplateLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->origin = std::move(origin);
  impl_->limits = limits;
  impl_->program = TemplateParser(split_template(source, impl_->origin), impl_->origin, limits.max_depth).parse();
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
const std::string& ChatTemplate::origin() const { return impl_->origin; }

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatTemplateContext& c) const {
  json msgs = json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  // What transformers' apply_chat_template passes: the messages, tools and documents
  // (None here), add_generation_prompt and the special tokens.
  std::map<std::string, Value> globals = {
      {"messages", Value{msgs}},         {"tools", Value{json()}},
      {"documents", Value{json()}},      {"add_generation_prompt", Value{c.add_generation_prompt}},
      {"bos_token", Value{c.bos_token}}, {"eos_token", Value{c.eos_token}}};
  Renderer r(impl_->origin, impl_->limits, std::move(globals));
  std::string out;
  r.run(impl_->program, out);
  return out;
}

std::string builtin_chat_template(const std::string& name) {
  auto it = builtins().find(name);
  return it == builtins().end() ? "" : it->second;
}

std::string builtin_chat_template_names() { return "chatml, llama3, mistral, alpaca"; }

}  // namespace zt::io
