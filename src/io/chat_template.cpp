// A small, safe interpreter of the Jinja subset chat templates use (io/chat_template.h).
// The template is parsed once into statements and expressions; rendering walks them with
// JSON values (nlohmann::json) plus an "undefined" flag, as jinja2's lenient Undefined:
// it prints as "", is false, and fails in arithmetic. Nothing outside the subset runs.
#include "io/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt::io {

namespace {

using json = nlohmann::json;

struct Value {
  json j;
  bool undefined = false;
  static Value undef() { return Value{json(), true}; }
};

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
        if (t.rfind("\n", 0) == 0) t.erase(0, 1);
        else if (t.rfind("\r\n", 0) == 0) t.erase(0, 2);
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
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          default: v += '\\', v += e;  // Python keeps unknown escapes as they are
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
  Literal, Name, Attr, Index, Slice, Call, Method, Filter, Test, Unary, Binary, And, Or, Not, Ternary, List, Dict
};
struct Node {
  NK kind;
  std::string name;  // Name, Attr, Method, Filter, Test, Unary/Binary operator
  json literal;
  bool negate = false;  // Test: `is not`
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

const char* const kFilters[] = {"trim",  "length", "count", "upper", "lower",   "capitalize", "default", "d",
                                "first", "last",   "string", "int",  "join",    "reverse",    "list",    "safe"};
const char* const kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "mapping",
                              "iterable", "sequence", "boolean", "true", "false", "even", "odd"};
const char* const kMethods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "upper", "lower",
                                "replace", "split", "items", "keys", "values", "get", "title"};
const char* const kFunctions[] = {"raise_exception", "namespace", "range"};

template <size_t N>
bool known(const char* const (&list)[N], const std::string& s) {
  return std::find_if(std::begin(list), std::end(list), [&](const char* n) { return s == n; }) != std::end(list);
}

class ExprParser {
 public:
  ExprParser(std::vector<Token> toks, std::string origin, std::string source)
      : t_(std::move(toks)), origin_(std::move(origin)), source_(std::move(source)) {}

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
    ZT_THROW_INPUT(origin_, ": cannot read the chat template expression '", source_, "': expected ", wanted,
                   " at '", t_[p_].kind == Tok::End ? std::string("end") : t_[p_].text,
                   "' (zerotrain reads the Jinja subset listed in docs/formats.md)");
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    ZT_THROW_INPUT(origin_, ": unsupported chat template construct ", what, " in '", source_,
                   "' (zerotrain reads the Jinja subset listed in docs/formats.md; pass a template it reads with "
                   "--chat-template FILE or a built-in name: ",
                   builtin_chat_template_names(), ")");
  }

 private:
  NodePtr ternary() {
    NodePtr a = or_expr();
    if (accept_name("if")) {
      auto n = make(NK::Ternary);
      NodePtr cond = or_expr();
      NodePtr other = accept_name("else") ? ternary() : nullptr;
      n->kids.push_back(std::move(a));
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(other));
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
      auto n = make(NK::Not);
      n->kids.push_back(not_expr());
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
        if (accept_name("in")) op = "in";
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
      if (accept_op("+")) a = binary(NK::Binary, "+", std::move(a), multiplicative());
      else if (accept_op("-")) a = binary(NK::Binary, "-", std::move(a), multiplicative());
      else return a;
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
      auto n = make(NK::Unary, "-");
      n->kids.push_back(unary());
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
        n->kids.push_back(std::move(a));
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
        n->kids.push_back(std::move(a));
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
          n->kids.push_back(std::move(a));
          call_args(*n);
          a = std::move(n);
        } else {
          auto n = make(NK::Attr, attr);
          n->kids.push_back(std::move(a));
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
          n->kids.push_back(std::move(a));
          n->kids.push_back(std::move(parts[0]));
          a = std::move(n);
        } else {
          auto n = make(NK::Slice);
          n->kids.push_back(std::move(a));
          for (auto& p : parts) n->kids.push_back(std::move(p));
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
        n.kwargs.emplace_back(std::move(key), ternary());
      } else {
        n.kids.push_back(ternary());
      }
      if (accept_op(")")) return;
      expect_op(",");
    }
  }
  NodePtr primary() {
    const Token& t = t_[p_];
    if (t.kind == Tok::String) {
      ++p_;
      auto n = make(NK::Literal);
      n->literal = t.text;
      // Adjacent string literals concatenate, as in Python.
      while (t_[p_].kind == Tok::String) n->literal = n->literal.get<std::string>() + t_[p_++].text;
      return n;
    }
    if (t.kind == Tok::Int || t.kind == Tok::Float) {
      ++p_;
      auto n = make(NK::Literal);
      if (t.kind == Tok::Int) n->literal = std::stoll(t.text);
      else n->literal = std::stod(t.text);
      return n;
    }
    if (t.kind == Tok::Name) {
      ++p_;
      auto n = make(NK::Literal);
      if (t.text == "true" || t.text == "True") n->literal = true;
      else if (t.text == "false" || t.text == "False") n->literal = false;
      else if (t.text == "none" || t.text == "None") n->literal = nullptr;
      else n = make(NK::Name, t.text);
      return n;
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
        n->kids.push_back(ternary());
        if (accept_op("]")) return n;
        expect_op(",");
      }
    }
    if (accept_op("{")) {
      auto n = make(NK::Dict);
      if (accept_op("}")) return n;
      for (;;) {
        n->kids.push_back(ternary());
        expect_op(":");
        n->kids.push_back(ternary());
        if (accept_op("}")) return n;
        expect_op(",");
      }
    }
    fail("a value");
  }
  static NodePtr binary(NK k, const std::string& op, NodePtr a, NodePtr b) {
    auto n = make(k, op);
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  std::string origin_, source_;
};

// ---- statements -------------------------------------------------------------------

struct Stmt;
using Block = std::vector<Stmt>;
enum class SK { Text, Output, If, For, Set, SetAttr };
struct Stmt {
  SK kind;
  std::string text;  // Text; Set/SetAttr/For: the variable; SetAttr: text.attr
  std::string attr, var2;
  NodePtr expr;      // Output, Set, For (the iterable)
  NodePtr filter;    // For: `if` filter
  std::vector<std::pair<NodePtr, Block>> branches;  // If: (condition, body); else has a null condition
  Block body;        // For
};

class TemplateParser {
 public:
  TemplateParser(std::vector<Segment> segs, std::string origin) : segs_(std::move(segs)), origin_(std::move(origin)) {}

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
        ExprParser p(lex_expr(s.text, origin_), origin_, s.text);
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
      ExprParser p(lex_expr(s.text, origin_), origin_, s.text);
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
      ExprParser p(lex_expr(segs_[pos_].text, origin_), origin_, segs_[pos_].text);
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
};

// ---- rendering --------------------------------------------------------------------

std::string python_str(const Value& v);

std::string python_repr(const json& j) {
  if (j.is_string()) {
    std::string s = j.get<std::string>(), out = "'";
    for (char c : s) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') out += "\\n";
      else out += c;
    }
    return out + "'";
  }
  return python_str(Value{j});
}

std::string python_str(const Value& v) {
  const json& j = v.j;
  if (v.undefined) return "";
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_number()) {
    const double d = j.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 1e16) return std::to_string(static_cast<int64_t>(d)) + ".0";
    return j.dump();
  }
  if (j.is_string()) return j.get<std::string>();
  std::string out;
  if (j.is_array()) {
    out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + python_repr(j[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it, first = false)
    out += (first ? "" : ", ") + python_repr(it.key()) + ": " + python_repr(it.value());
  return out + "}";
}

bool truthy(const Value& v) {
  const json& j = v.j;
  if (v.undefined || j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number()) return j.get<double>() != 0;
  if (j.is_string() || j.is_array() || j.is_object()) return !j.empty();
  return false;
}

std::string type_name(const Value& v) { return v.undefined ? "undefined" : v.j.type_name(); }

std::string strip_chars(const std::string& s, bool left, bool right, const std::string& chars = " \t\n\r\f\v") {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right)
    while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

class Renderer {
 public:
  Renderer(const std::string& origin, std::map<std::string, Value> globals) : origin_(origin) {
    scopes_.push_back(std::move(globals));
  }

  void run(const Block& block, std::string& out) {
    for (const Stmt& s : block) {
      switch (s.kind) {
        case SK::Text: out += s.text; break;
        case SK::Output: out += python_str(eval(*s.expr)); break;
        case SK::If:
          for (const auto& [cond, body] : s.branches)
            if (!cond || truthy(eval(*cond))) {
              run(body, out);
              break;
            }
          break;
        case SK::Set: scopes_.back()[s.text] = eval(*s.expr); break;
        case SK::SetAttr: {
          Value* ns = lookup(s.text);
          if (!ns || !ns->j.is_object())
            fail("'{% set " + s.text + "." + s.attr + " %}' needs " + s.text + " to be a namespace()");
          ns->j[s.attr] = eval(*s.expr).j;
          break;
        }
        case SK::For: run_for(s, out); break;
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { ZT_THROW_INPUT(origin_, ": ", what); }

  Value* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  void run_for(const Stmt& s, std::string& out) {
    const Value seq = eval(*s.expr);
    std::vector<json> items;
    if (seq.undefined || seq.j.is_null()) {
    } else if (seq.j.is_array()) {
      items.assign(seq.j.begin(), seq.j.end());
    } else if (seq.j.is_object()) {
      for (auto it = seq.j.begin(); it != seq.j.end(); ++it) items.push_back(it.key());
    } else if (seq.j.is_string()) {
      for (char c : seq.j.get<std::string>()) items.push_back(std::string(1, c));
    } else {
      fail("cannot loop over a " + type_name(seq));
    }
    scopes_.emplace_back();
    auto bind = [&](const json& item) {
      if (s.var2.empty()) {
        scopes_.back()[s.text] = Value{item};
      } else {
        if (!item.is_array() || item.size() != 2) fail("'for " + s.text + ", " + s.var2 + "' needs pairs");
        scopes_.back()[s.text] = Value{item[0]};
        scopes_.back()[s.var2] = Value{item[1]};
      }
    };
    if (s.filter) {
      std::vector<json> kept;
      for (const json& item : items) {
        bind(item);
        if (truthy(eval(*s.filter))) kept.push_back(item);
      }
      items.swap(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      bind(items[static_cast<size_t>(i)]);
      scopes_.back()["loop"] = Value{json{{"index0", i},
                                          {"index", i + 1},
                                          {"first", i == 0},
                                          {"last", i == n - 1},
                                          {"length", n},
                                          {"revindex", n - i},
                                          {"revindex0", n - i - 1}}};
      run(s.body, out);
    }
    scopes_.pop_back();
  }

  int64_t as_int(const Value& v, const char* what) const {
    if (v.j.is_number_integer()) return v.j.get<int64_t>();
    if (v.j.is_boolean()) return v.j.get<bool>() ? 1 : 0;
    fail(std::string(what) + " needs an integer, got " + type_name(v));
  }

  Value index(const Value& a, const Value& k) const {
    if (a.j.is_object()) {
      if (!k.j.is_string()) return Value::undef();
      auto it = a.j.find(k.j.get<std::string>());
      return it == a.j.end() ? Value::undef() : Value{*it};
    }
    if ((a.j.is_array() || a.j.is_string()) && k.j.is_number_integer()) {
      const int64_t n = a.j.is_array() ? static_cast<int64_t>(a.j.size()) : static_cast<int64_t>(a.j.get_ref<const std::string&>().size());
      int64_t i = k.j.get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undef();
      if (a.j.is_array()) return Value{a.j[static_cast<size_t>(i)]};
      return Value{std::string(1, a.j.get_ref<const std::string&>()[static_cast<size_t>(i)])};
    }
    return Value::undef();
  }

  Value slice(const Value& a, const Node& n) {
    const bool is_str = a.j.is_string();
    if (!a.j.is_array() && !is_str) fail("cannot slice a " + type_name(a));
    const int64_t len = is_str ? static_cast<int64_t>(a.j.get_ref<const std::string&>().size())
                               : static_cast<int64_t>(a.j.size());
    const int64_t step = n.kids[3] ? as_int(eval(*n.kids[3]), "a slice step") : 1;
    if (step == 0) fail("slice step cannot be zero");
    auto bound = [&](const NodePtr& e, int64_t def) {
      if (!e) return def;
      int64_t v = as_int(eval(*e), "a slice bound");
      if (v < 0) v += len;
      return step > 0 ? std::clamp<int64_t>(v, 0, len) : std::clamp<int64_t>(v, -1, len - 1);
    };
    const int64_t b = bound(n.kids[1], step > 0 ? 0 : len - 1), e = bound(n.kids[2], step > 0 ? len : -1);
    json out = is_str ? json(std::string()) : json::array();
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
      if (is_str) out.get_ref<std::string&>() += a.j.get_ref<const std::string&>()[static_cast<size_t>(i)];
      else out.push_back(a.j[static_cast<size_t>(i)]);
    }
    return Value{out};
  }

  static int compare(const Value& a, const Value& b, bool& ok) {
    ok = true;
    if (a.j.is_number() && b.j.is_number()) {
      const double x = a.j.get<double>(), y = b.j.get<double>();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.j.is_string() && b.j.is_string()) return a.j.get<std::string>().compare(b.j.get<std::string>());
    ok = false;
    return 0;
  }

  static bool equal(const Value& a, const Value& b) {
    if (a.undefined || b.undefined) return a.undefined && b.undefined;
    return a.j == b.j;
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value{equal(a, b)};
    if (op == "!=") return Value{!equal(a, b)};
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.j.is_string() && a.j.is_string())
        found = b.j.get_ref<const std::string&>().find(a.j.get<std::string>()) != std::string::npos;
      else if (b.j.is_array())
        found = std::any_of(b.j.begin(), b.j.end(), [&](const json& x) { return x == a.j; });
      else if (b.j.is_object())
        found = a.j.is_string() && b.j.contains(a.j.get<std::string>());
      else if (!b.undefined && !b.j.is_null())
        fail("'in' needs a string, list or mapping on its right, got " + type_name(b));
      return Value{op == "in" ? found : !found};
    }
    if (op == "~") return Value{python_str(a) + python_str(b)};
    if (a.undefined || b.undefined)
      fail("'" + op + "' on an undefined value (" + type_name(a) + " " + op + " " + type_name(b) + ")");
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      bool ok;
      const int c = compare(a, b, ok);
      if (!ok) fail("cannot compare " + type_name(a) + " and " + type_name(b));
      return Value{op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0};
    }
    if (op == "+") {
      if (a.j.is_string() && b.j.is_string()) return Value{a.j.get<std::string>() + b.j.get<std::string>()};
      if (a.j.is_array() && b.j.is_array()) {
        json r = a.j;
        for (const auto& x : b.j) r.push_back(x);
        return Value{r};
      }
    }
    if (!a.j.is_number() || !b.j.is_number())
      fail("cannot apply '" + op + "' to " + type_name(a) + " and " + type_name(b));
    const bool ints = a.j.is_number_integer() && b.j.is_number_integer();
    if (ints && op != "/") {
      const int64_t x = a.j.get<int64_t>(), y = b.j.get<int64_t>();
      if ((op == "//" || op == "%") && y == 0) fail("integer division or modulo by zero");
      if (op == "+") return Value{x + y};
      if (op == "-") return Value{x - y};
      if (op == "*") return Value{x * y};
      // Python's floor division and modulo (the sign of the divisor).
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
      return Value{op == "//" ? q : r};
    }
    const double x = a.j.get<double>(), y = b.j.get<double>();
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
    auto need_string = [&]() -> const std::string& {
      if (!a.j.is_string()) fail("filter '" + f + "' needs a string, got " + type_name(a));
      return a.j.get_ref<const std::string&>();
    };
    if (f == "trim") return Value{strip_chars(need_string(), true, true)};
    if (f == "upper" || f == "lower") {
      std::string s = need_string();
      for (char& c : s) c = static_cast<char>(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                           : std::tolower(static_cast<unsigned char>(c)));
      return Value{s};
    }
    if (f == "capitalize") {
      std::string s = need_string();
      for (size_t i = 0; i < s.size(); ++i)
        s[i] = static_cast<char>(i ? std::tolower(static_cast<unsigned char>(s[i])) : std::toupper(static_cast<unsigned char>(s[i])));
      return Value{s};
    }
    if (f == "length" || f == "count") {
      if (a.j.is_string()) return Value{static_cast<int64_t>(a.j.get_ref<const std::string&>().size())};
      if (a.j.is_array() || a.j.is_object()) return Value{static_cast<int64_t>(a.j.size())};
      fail("filter '" + f + "' needs a string, list or mapping, got " + type_name(a));
    }
    if (f == "default" || f == "d") {
      const bool boolean = args.size() > 1 && truthy(args[1]);
      if (a.undefined || (boolean && !truthy(a))) return args.empty() ? Value{std::string()} : args[0];
      return a;
    }
    if (f == "first" || f == "last") {
      if (a.j.is_array()) return a.j.empty() ? Value::undef() : Value{f == "first" ? a.j.front() : a.j.back()};
      if (a.j.is_string()) {
        const std::string& s = a.j.get_ref<const std::string&>();
        return s.empty() ? Value::undef() : Value{std::string(1, f == "first" ? s.front() : s.back())};
      }
      fail("filter '" + f + "' needs a list or string, got " + type_name(a));
    }
    if (f == "string" || f == "safe") return Value{python_str(a)};
    if (f == "int") {
      if (a.j.is_number()) return Value{static_cast<int64_t>(a.j.get<double>())};
      if (a.j.is_string()) {
        try {
          return Value{static_cast<int64_t>(std::stoll(a.j.get<std::string>()))};
        } catch (const std::exception&) {
          return Value{int64_t{0}};
        }
      }
      return Value{int64_t{0}};
    }
    if (f == "join") {
      if (!a.j.is_array()) fail("filter 'join' needs a list, got " + type_name(a));
      const std::string sep = args.empty() ? "" : python_str(args[0]);
      std::string out;
      for (size_t i = 0; i < a.j.size(); ++i) out += (i ? sep : "") + python_str(Value{a.j[i]});
      return Value{out};
    }
    if (f == "reverse") {
      if (a.j.is_string()) {
        std::string s = a.j.get<std::string>();
        std::reverse(s.begin(), s.end());
        return Value{s};
      }
      if (!a.j.is_array()) fail("filter 'reverse' needs a list or string, got " + type_name(a));
      json r = json::array();
      for (auto it = a.j.rbegin(); it != a.j.rend(); ++it) r.push_back(*it);
      return Value{r};
    }
    // list
    if (a.j.is_array()) return a;
    if (a.j.is_string()) {
      json r = json::array();
      for (char c : a.j.get<std::string>()) r.push_back(std::string(1, c));
      return Value{r};
    }
    fail("filter 'list' needs a list or string, got " + type_name(a));
  }

  Value test(const Node& n) {
    const Value a = eval(*n.kids[0]);
    const std::string& t = n.name;
    bool r = false;
    if (t == "defined") r = !a.undefined;
    else if (t == "undefined") r = a.undefined;
    else if (t == "none") r = !a.undefined && a.j.is_null();
    else if (t == "string") r = a.j.is_string();
    else if (t == "number") r = a.j.is_number();
    else if (t == "integer") r = a.j.is_number_integer();
    else if (t == "boolean") r = a.j.is_boolean();
    else if (t == "true") r = a.j.is_boolean() && a.j.get<bool>();
    else if (t == "false") r = a.j.is_boolean() && !a.j.get<bool>();
    else if (t == "mapping") r = a.j.is_object();
    else if (t == "iterable") r = a.j.is_array() || a.j.is_object() || a.j.is_string();
    else if (t == "sequence") r = a.j.is_array() || a.j.is_string() || a.j.is_object();
    else if (t == "even" || t == "odd") r = (as_int(a, "'is even/odd'") % 2 == 0) == (t == "even");
    return Value{n.negate ? !r : r};
  }

  Value method(const Node& n) {
    const Value a = eval(*n.kids[0]);
    std::vector<Value> args;
    for (size_t i = 1; i < n.kids.size(); ++i) args.push_back(eval(*n.kids[i]));
    const std::string& m = n.name;
    auto arg_str = [&](size_t i) {
      if (i >= args.size() || !args[i].j.is_string()) fail("." + m + "() needs a string argument");
      return args[i].j.get<std::string>();
    };
    if (a.j.is_object()) {
      if (m == "items") {
        json r = json::array();
        for (auto it = a.j.begin(); it != a.j.end(); ++it) r.push_back(json::array({it.key(), it.value()}));
        return Value{r};
      }
      if (m == "keys" || m == "values") {
        json r = json::array();
        for (auto it = a.j.begin(); it != a.j.end(); ++it) r.push_back(m == "keys" ? json(it.key()) : it.value());
        return Value{r};
      }
      if (m == "get") {
        const Value v = index(a, args.empty() ? Value::undef() : args[0]);
        return v.undefined ? (args.size() > 1 ? args[1] : Value{json()}) : v;
      }
    }
    if (!a.j.is_string()) fail("." + m + "() on a " + type_name(a));
    const std::string& s = a.j.get_ref<const std::string&>();
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      const std::string chars = args.empty() || args[0].j.is_null() ? " \t\n\r\f\v" : arg_str(0);
      return Value{strip_chars(s, m != "rstrip", m != "lstrip", chars)};
    }
    if (m == "startswith") return Value{s.rfind(arg_str(0), 0) == 0};
    if (m == "endswith") {
      const std::string x = arg_str(0);
      return Value{s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0};
    }
    if (m == "upper" || m == "lower" || m == "title") {
      std::string r = s;
      bool start = true;
      for (char& c : r) {
        const auto u = static_cast<unsigned char>(c);
        if (m == "upper") c = static_cast<char>(std::toupper(u));
        else if (m == "lower") c = static_cast<char>(std::tolower(u));
        else c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = !std::isalpha(u);
      }
      return Value{r};
    }
    if (m == "replace") {
      const std::string from = arg_str(0), to = arg_str(1);
      if (from.empty()) fail(".replace() with an empty pattern");
      std::string r;
      size_t i = 0;
      for (size_t f; (f = s.find(from, i)) != std::string::npos; i = f + from.size()) r += s.substr(i, f - i) + to;
      return Value{r + s.substr(i)};
    }
    if (m == "split") {
      json r = json::array();
      if (args.empty() || args[0].j.is_null()) {
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && is_space(s[i])) ++i;
          size_t j = i;
          while (j < s.size() && !is_space(s[j])) ++j;
          if (j > i) r.push_back(s.substr(i, j - i));
          i = j;
        }
        return Value{r};
      }
      const std::string sep = arg_str(0);
      if (sep.empty()) fail(".split() with an empty separator");
      size_t i = 0;
      for (size_t f; (f = s.find(sep, i)) != std::string::npos; i = f + sep.size()) r.push_back(s.substr(i, f - i));
      r.push_back(s.substr(i));
      return Value{r};
    }
    fail("." + m + "() on a string");
  }

  Value call(const Node& n) {
    if (n.name == "raise_exception") {
      const std::string msg = n.kids.empty() ? "" : python_str(eval(*n.kids[0]));
      fail("the chat template refused the conversation: " + msg);
    }
    if (n.name == "namespace") {
      json ns = json::object();
      for (const auto& [k, v] : n.kwargs) ns[k] = eval(*v).j;
      return Value{ns};
    }
    // range
    std::vector<int64_t> a;
    for (const auto& k : n.kids) a.push_back(as_int(eval(*k), "range()"));
    if (a.empty() || a.size() > 3) fail("range() takes 1 to 3 integers");
    const int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0], step = a.size() > 2 ? a[2] : 1;
    if (step == 0) fail("range() step cannot be zero");
    json r = json::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) r.push_back(i);
    return Value{r};
  }

  Value eval(const Node& n) {
    switch (n.kind) {
      case NK::Literal: return Value{n.literal};
      case NK::Name: {
        const Value* v = lookup(n.name);
        return v ? *v : Value::undef();
      }
      case NK::Attr: {
        const Value a = eval(*n.kids[0]);
        return index(a, Value{n.name});
      }
      case NK::Index: return index(eval(*n.kids[0]), eval(*n.kids[1]));
      case NK::Slice: return slice(eval(*n.kids[0]), n);
      case NK::Call: return call(n);
      case NK::Method: return method(n);
      case NK::Filter: return filter(n);
      case NK::Test: return test(n);
      case NK::Unary: {
        const Value a = eval(*n.kids[0]);
        if (a.j.is_number_integer()) return Value{-a.j.get<int64_t>()};
        if (a.j.is_number()) return Value{-a.j.get<double>()};
        fail("unary '-' on a " + type_name(a));
      }
      case NK::Binary: return binary(n.name, eval(*n.kids[0]), eval(*n.kids[1]));
      case NK::And: {
        Value a = eval(*n.kids[0]);
        return truthy(a) ? eval(*n.kids[1]) : a;
      }
      case NK::Or: {
        Value a = eval(*n.kids[0]);
        return truthy(a) ? a : eval(*n.kids[1]);
      }
      case NK::Not: return Value{!truthy(eval(*n.kids[0]))};
      case NK::Ternary:
        if (truthy(eval(*n.kids[1]))) return eval(*n.kids[0]);
        return n.kids[2] ? eval(*n.kids[2]) : Value::undef();
      case NK::List: {
        json r = json::array();
        for (const auto& k : n.kids) r.push_back(eval(*k).j);
        return Value{r};
      }
      case NK::Dict: {
        json r = json::object();
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          const Value k = eval(*n.kids[i]);
          if (!k.j.is_string()) fail("dictionary keys must be strings");
          r[k.j.get<std::string>()] = eval(*n.kids[i + 1]).j;
        }
        return Value{r};
      }
    }
    fail("internal: unknown expression");
  }

  const std::string& origin_;
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
  Block program;
};

ChatTemplate::ChatTemplate(const std::string& source, std::string origin) : impl_(std::make_unique<Impl>()) {
  impl_->origin = std::move(origin);
  impl_->program = TemplateParser(split_template(source, impl_->origin), impl_->origin).parse();
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
  std::map<std::string, Value> globals = {{"messages", Value{msgs}},
                                          {"tools", Value{json()}},
                                          {"documents", Value{json()}},
                                          {"add_generation_prompt", Value{c.add_generation_prompt}},
                                          {"bos_token", Value{c.bos_token}},
                                          {"eos_token", Value{c.eos_token}}};
  Renderer r(impl_->origin, std::move(globals));
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
