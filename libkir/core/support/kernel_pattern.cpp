// Kernel-name patterns (kir/support/kernel_pattern.hpp): an iterative parser
// that emits a Thompson NFA as it reads, and a Pike VM that simulates it.
//
// The program is a vector of instructions whose jumps are relative to their own
// index, laid out as in Russ Cox's "Regular Expression Matching: the Virtual
// Machine Approach": every construct is a contiguous block that is entered at
// its first instruction and left by falling off its end, so a block can be
// copied (counted repetition) or wrapped (quantifiers, alternation) where it
// lies, at the end of the program, with no pointer to fix. Every wrap or copy
// grows the program, which is capped at kMaxProgram instructions, so compiling
// costs at most O(kMaxProgram^2) moves whatever the pattern.
#include "kir/support/kernel_pattern.hpp"

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kir/support/demangle.hpp"

namespace kir {

namespace {

using ByteSet = std::bitset<256>;

enum class Op : uint8_t {
  Byte,          // consume one byte in sets[set]
  Split,         // go on at +x and at +y
  Jump,          // go on at +x
  Begin,         // ^: at the start of the text
  End,           // $: at the end of the text
  WordBoundary,  // \b: between a word byte and a non-word byte (or an end)
  Match,
};

struct Inst {
  Op op;
  uint32_t set = 0;
  int32_t x = 0, y = 0;
};

bool is_word(unsigned char c) { return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

ByteSet range(unsigned lo, unsigned hi) {
  ByteSet s;
  for (unsigned c = lo; c <= hi; ++c) s.set(c);
  return s;
}

ByteSet word_set() { return range('a', 'z') | range('A', 'Z') | range('0', '9') | range('_', '_'); }
ByteSet space_set() { return range(' ', ' ') | range('\t', '\r'); }  // \t \n \v \f \r

std::string offset_text(size_t at) { return " at offset " + std::to_string(at); }

}  // namespace

struct KernelPattern::Program {
  std::vector<Inst> code;
  std::vector<ByteSet> sets;
};

namespace {

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Expected<std::shared_ptr<KernelPattern::Program>> run();

 private:
  enum class Last { Nothing, Atom, Repetition, Anchor };
  struct Group {
    size_t start;                  // first instruction of the group's block
    size_t offset;                 // of its '(' in the pattern (npos: the whole pattern)
    std::vector<size_t> branches;  // where each '|' cut the block
  };

  /// "<construct> at offset N: <problem>"
  Error error(const std::string& construct, size_t at, const std::string& problem) const {
    return Error(ErrorCode::invalid_argument, construct + offset_text(at) + ": " + problem, at);
  }
  std::optional<Error> grow(size_t extra, size_t at) const {
    if (prog_->code.size() + extra <= KernelPattern::kMaxProgram) return std::nullopt;
    return error(
        "pattern too large", at,
        "more than " + std::to_string(KernelPattern::kMaxProgram) + " NFA instructions (counted repetitions expanded)");
  }
  void emit(Inst inst) { prog_->code.push_back(inst); }
  std::optional<Error> emit_set(ByteSet set, size_t at);
  std::optional<Error> close_group(const Group& group);
  std::optional<Error> repeat(size_t at);
  std::optional<Error> bracket();
  std::optional<Error> escape();
  std::optional<Error> group_open();
  /// An escape that stands for a byte set (\d \w \s \D \W \S) or one byte; false otherwise.
  bool class_escape(char c, ByteSet& set) const;
  bool byte_escape(char c, unsigned char& byte) const;

  std::string_view p_;
  size_t i_ = 0;
  bool icase_ = false;
  std::shared_ptr<KernelPattern::Program> prog_ = std::make_shared<KernelPattern::Program>();
  std::vector<Group> groups_;
  Last last_ = Last::Nothing;
  size_t atom_ = 0;  // the last atom's block starts here (when last_ is Atom)
};

bool Parser::class_escape(char c, ByteSet& set) const {
  switch (c) {
    case 'd': set = range('0', '9'); return true;
    case 'D': set = ~range('0', '9'); return true;
    case 'w': set = word_set(); return true;
    case 'W': set = ~word_set(); return true;
    case 's': set = space_set(); return true;
    case 'S': set = ~space_set(); return true;
    default: return false;
  }
}

bool Parser::byte_escape(char c, unsigned char& byte) const {
  switch (c) {
    case 't': byte = '\t'; return true;
    case 'n': byte = '\n'; return true;
    case 'r': byte = '\r'; return true;
    case 'f': byte = '\f'; return true;
    case 'v': byte = '\v'; return true;
    default:
      // A backslash before punctuation (or a space) is that character in every dialect.
      if (static_cast<unsigned char>(c) < 0x80 && !is_word(static_cast<unsigned char>(c)) && c >= ' ' && c != 0x7f) {
        byte = static_cast<unsigned char>(c);
        return true;
      }
      return false;
  }
}

std::optional<Error> Parser::emit_set(ByteSet set, size_t at) {
  if (auto e = grow(1, at)) return e;
  if (icase_)
    for (unsigned c = 'a'; c <= 'z'; ++c)
      if (set[c] || set[c - 32]) set.set(c).set(c - 32);
  atom_ = prog_->code.size();
  last_ = Last::Atom;
  prog_->sets.push_back(set);
  emit({Op::Byte, static_cast<uint32_t>(prog_->sets.size() - 1)});
  return std::nullopt;
}

std::optional<Error> Parser::group_open() {
  size_t at = i_;
  if (p_.substr(i_, 3) == "(?:") {
    i_ += 3;
  } else if (p_.substr(i_, 2) == "(?") {
    static const std::pair<std::string_view, const char*> kinds[] = {{"(?<=", "lookbehind"},
                                                                     {"(?<!", "negative lookbehind"},
                                                                     {"(?=", "lookahead"},
                                                                     {"(?!", "negative lookahead"},
                                                                     {"(?P<", "named group"},
                                                                     {"(?P=", "named backreference"},
                                                                     {"(?P>", "named subroutine call"},
                                                                     {"(?<", "named group"},
                                                                     {"(?'", "named group"},
                                                                     {"(?#", "comment"},
                                                                     {"(?>", "atomic group"},
                                                                     {"(?|", "branch reset group"},
                                                                     {"(?(", "conditional"}};
    for (const auto& [prefix, name] : kinds)
      if (p_.substr(i_, prefix.size()) == prefix)
        return error(std::string(name) + " " + std::string(prefix), at, "not supported");
    if (p_.substr(i_, 4) == "(?i)") return error("(?i)", at, "supported only at the start of the pattern");
    size_t end = i_ + 2;
    while (end < p_.size() && end < i_ + 12 && p_[end] != ')' && p_[end] != ':') ++end;
    return error("inline flags " + std::string(p_.substr(i_, end + 1 - i_)), at, "not supported (only a leading (?i))");
  } else {
    ++i_;
  }
  groups_.push_back({prog_->code.size(), at, {}});
  last_ = Last::Nothing;
  return std::nullopt;
}

std::optional<Error> Parser::close_group(const Group& group) {
  if (group.branches.empty()) return std::nullopt;
  std::vector<Inst>& code = prog_->code;
  // Branches b0 .. bk become: Split(+1, next) b0 Jump(end) Split(+1, next) b1 Jump(end) ... bk.
  size_t k = group.branches.size();
  size_t at = group.offset == std::string::npos ? 0 : group.offset;
  if (auto e = grow(2 * k, at)) return e;
  std::vector<Inst> tail(code.begin() + static_cast<std::ptrdiff_t>(group.start), code.end());
  code.resize(group.start);
  size_t total = tail.size() + 2 * k, end = group.start + total;
  size_t from = 0;
  for (size_t b = 0; b <= k; ++b) {
    size_t to = b < k ? group.branches[b] - group.start : tail.size();
    size_t length = to - from;
    if (b < k) emit({Op::Split, 0, 1, static_cast<int32_t>(length + 2)});
    code.insert(code.end(), tail.begin() + static_cast<std::ptrdiff_t>(from),
                tail.begin() + static_cast<std::ptrdiff_t>(to));
    if (b < k) emit({Op::Jump, 0, static_cast<int32_t>(end - code.size())});
    from = to;
  }
  return std::nullopt;
}

std::optional<Error> Parser::repeat(size_t at) {
  char op = p_[i_];
  size_t min = 0, max = SIZE_MAX;  // SIZE_MAX: no upper bound
  if (op == '{') {
    auto number = [&](size_t& j, size_t& value) {
      size_t start = j;
      value = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        if (value <= KernelPattern::kMaxRepeat) value = value * 10 + static_cast<size_t>(p_[j] - '0');
        ++j;
      }
      return j > start;
    };
    size_t j = i_ + 1;
    bool ok = number(j, min);
    if (ok && j < p_.size() && p_[j] == ',') {
      ++j;
      if (j < p_.size() && p_[j] != '}') ok = number(j, max);
    } else {
      max = min;
    }
    if (!ok || j >= p_.size() || p_[j] != '}')
      return error("'{'", at, "not a repetition {n}, {n,} or {n,m} (write \\{ for a brace)");
    std::string text(p_.substr(i_, j + 1 - i_));
    if (min > KernelPattern::kMaxRepeat || (max != SIZE_MAX && max > KernelPattern::kMaxRepeat))
      return error("repetition " + text, at, "counts past " + std::to_string(KernelPattern::kMaxRepeat));
    if (max < min) return error("repetition " + text, at, "bounds reversed");
    i_ = j + 1;
  } else {
    min = op == '+' ? 1 : 0;
    max = op == '?' ? 1 : SIZE_MAX;
    ++i_;
  }
  if (last_ == Last::Repetition)
    return error(std::string("repetition '") + op + "'", at,
                 "repeats a repetition (possessive or doubled quantifiers are not supported; group with (?:...))");
  if (last_ != Last::Atom) return error(std::string("repetition '") + op + "'", at, "nothing to repeat");
  if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same names match
  last_ = Last::Repetition;

  std::vector<Inst>& code = prog_->code;
  std::vector<Inst> block(code.begin() + static_cast<std::ptrdiff_t>(atom_), code.end());
  size_t n = block.size();
  size_t copies = max == SIZE_MAX ? (min == 0 ? 1 : min) : max;
  size_t needed = copies * n + (max == SIZE_MAX ? 2 : max - min);
  if (needed > n)
    if (auto e = grow(needed - n, at)) return e;
  code.resize(atom_);
  auto put = [&] { code.insert(code.end(), block.begin(), block.end()); };
  for (size_t c = 0; c < min; ++c) put();
  if (max == SIZE_MAX) {
    if (min == 0) {  // L: Split(+1, out) block Jump(L)
      emit({Op::Split, 0, 1, static_cast<int32_t>(n + 2)});
      put();
      emit({Op::Jump, 0, -static_cast<int32_t>(n + 1)});
    } else {  // ... block Split(block, +1)
      emit({Op::Split, 0, -static_cast<int32_t>(n), 1});
    }
  } else {
    for (size_t c = min; c < max; ++c) {  // block? block? ...: at most max - min more
      emit({Op::Split, 0, 1, static_cast<int32_t>(n + 1)});
      put();
    }
  }
  return std::nullopt;
}

std::optional<Error> Parser::bracket() {
  size_t open = i_++;
  bool negate = i_ < p_.size() && p_[i_] == '^';
  if (negate) ++i_;
  size_t first = i_;
  ByteSet set;
  for (;;) {
    if (i_ >= p_.size()) return error("[", open, "missing ]");
    size_t at = i_;
    unsigned char c = static_cast<unsigned char>(p_[i_]);
    if (c == ']' && at != first) {
      ++i_;
      break;
    }
    if (c == '[') {
      if (p_.substr(i_, 2) == "[:") {
        size_t end = p_.find(":]", i_ + 2);
        if (end == std::string_view::npos) return error("[:", at, "missing :]");
        std::string_view name = p_.substr(i_ + 2, end - i_ - 2);
        static const std::pair<std::string_view, ByteSet (*)()> classes[] = {
            {"alpha", [] { return range('a', 'z') | range('A', 'Z'); }},
            {"digit", [] { return range('0', '9'); }},
            {"alnum", [] { return range('a', 'z') | range('A', 'Z') | range('0', '9'); }},
            {"upper", [] { return range('A', 'Z'); }},
            {"lower", [] { return range('a', 'z'); }},
            {"space", [] { return space_set(); }},
            {"blank", [] { return range(' ', ' ') | range('\t', '\t'); }},
            {"punct", [] { return range('!', '/') | range(':', '@') | range('[', '`') | range('{', '~'); }},
            {"xdigit", [] { return range('0', '9') | range('a', 'f') | range('A', 'F'); }},
            {"cntrl", [] { return range(0, 0x1f) | range(0x7f, 0x7f); }},
            {"print", [] { return range(' ', '~'); }},
            {"graph", [] { return range('!', '~'); }}};
        bool known = false;
        for (const auto& [n, make] : classes)
          if (n == name) {
            set |= make();
            known = true;
          }
        if (!known) return error("class [:" + std::string(name) + ":]", at, "unknown");
        i_ = end + 2;
        if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') return error("range", at, "from a class");
        continue;
      }
      if (p_.substr(i_, 2) == "[=" || p_.substr(i_, 2) == "[.")
        return error("collating element or equivalence class " + std::string(p_.substr(i_, 2)), at, "not supported");
      return error("'[' inside a bracket expression", at, "not supported (write \\[)");
    }
    // One element: a byte, an escape, or a range of two.
    auto element = [&](unsigned char& byte, ByteSet* klass) -> std::optional<Error> {
      size_t here = i_;
      unsigned char b = static_cast<unsigned char>(p_[i_]);
      if (b == '\\') {
        if (i_ + 1 >= p_.size()) return error("[", open, "missing ]");
        char e = p_[i_ + 1];
        i_ += 2;
        ByteSet s;
        if (klass && class_escape(e, s)) {
          *klass = s;
          return std::nullopt;
        }
        if (e == 'b') return error("\\b inside a bracket expression", here, "not supported");
        if (!byte_escape(e, byte)) return error("escape \\" + std::string(1, e), here, "not supported");
        return std::nullopt;
      }
      if (b >= 0x80)
        return error("non-ASCII byte in a bracket expression", here, "not supported (names are matched as bytes)");
      if (b == '-' && !klass) return error("'-' as the end of a range", here, "not supported (write \\-)");
      byte = b;
      ++i_;
      return std::nullopt;
    };
    if (c == '-') {  // a literal '-' first or last only
      if (at != first && !(i_ + 1 < p_.size() && p_[i_ + 1] == ']'))
        return error("'-'", at, "neither first, last nor a range in a bracket expression (write \\-)");
      set.set('-');
      ++i_;
      continue;
    }
    unsigned char lo = 0;
    ByteSet klass;
    bool is_class = false;
    if (auto e = element(lo, &klass)) return e;
    is_class = klass.any();
    if (is_class) {
      set |= klass;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') return error("range", at, "from a class");
      continue;
    }
    if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
      ++i_;
      unsigned char hi = 0;
      if (i_ < p_.size() && p_[i_] == '\\' && i_ + 1 < p_.size()) {
        ByteSet dummy;
        if (class_escape(p_[i_ + 1], dummy)) return error("range", at, "to a class");
      }
      if (auto e = element(hi, nullptr)) return e;
      if (hi < lo) return error("range " + std::string(p_.substr(at, i_ - at)), at, "ends reversed");
      set |= range(lo, hi);
    } else {
      set.set(lo);
    }
  }
  if (icase_)
    for (unsigned c = 'a'; c <= 'z'; ++c)
      if (set[c] || set[c - 32]) set.set(c).set(c - 32);
  if (negate) set = ~set;
  bool saved = icase_;
  icase_ = false;  // already folded before the negation
  auto e = emit_set(set, open);
  icase_ = saved;
  return e;
}

std::optional<Error> Parser::escape() {
  size_t at = i_;
  if (i_ + 1 >= p_.size()) return error("\\", at, "nothing to escape at the end of the pattern");
  char e = p_[i_ + 1];
  i_ += 2;
  ByteSet set;
  if (class_escape(e, set)) return emit_set(set, at);
  unsigned char byte = 0;
  if (byte_escape(e, byte)) return emit_set(ByteSet().set(byte), at);
  if (e == 'b') {
    if (auto err = grow(1, at)) return err;
    emit({Op::WordBoundary});
    last_ = Last::Anchor;
    return std::nullopt;
  }
  if (e >= '0' && e <= '9') return error("backreference \\" + std::string(1, e), at, "not supported");
  if (static_cast<unsigned char>(e) >= 0x80) return emit_set(ByteSet().set(static_cast<unsigned char>(e)), at);
  return error("escape \\" + std::string(1, e), at, "not supported");
}

Expected<std::shared_ptr<KernelPattern::Program>> Parser::run() {
  if (p_.substr(0, 4) == "(?i)") {
    icase_ = true;
    i_ = 4;
  }
  groups_.push_back({0, std::string::npos, {}});
  while (i_ < p_.size()) {
    size_t at = i_;
    char c = p_[i_];
    std::optional<Error> failed;
    switch (c) {
      case '(': failed = group_open(); break;
      case ')': {
        if (groups_.size() == 1) return error(")", at, "unmatched");
        Group group = std::move(groups_.back());
        groups_.pop_back();
        failed = close_group(group);
        atom_ = group.start;
        last_ = Last::Atom;
        ++i_;
        break;
      }
      case '|':
        groups_.back().branches.push_back(prog_->code.size());
        last_ = Last::Nothing;
        ++i_;
        break;
      case '*':
      case '+':
      case '?':
      case '{': failed = repeat(at); break;
      case '^':
      case '$':
        failed = grow(1, at);
        emit({c == '^' ? Op::Begin : Op::End});
        last_ = Last::Anchor;
        ++i_;
        break;
      case '.':
        ++i_;
        failed = emit_set(~ByteSet().set('\n'), at);
        break;
      case '[': failed = bracket(); break;
      case '\\': failed = escape(); break;
      default: ++i_; failed = emit_set(ByteSet().set(static_cast<unsigned char>(c)), at);
    }
    if (failed) return *failed;
  }
  if (groups_.size() > 1) return error("(", groups_.back().offset, "missing )");
  if (auto failed = close_group(groups_.back())) return *failed;
  if (auto failed = grow(1, p_.size())) return *failed;
  emit({Op::Match});
  return prog_;
}

/// A set of program counters with O(1) insert, test and clear (Briggs & Torczon).
class SparseSet {
 public:
  explicit SparseSet(size_t n) : dense_(n), sparse_(n) {}
  bool contains(uint32_t v) const { return sparse_[v] < size_ && dense_[sparse_[v]] == v; }
  void insert(uint32_t v) {
    sparse_[v] = static_cast<uint32_t>(size_);
    dense_[size_++] = v;
  }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  uint32_t operator[](size_t k) const { return dense_[k]; }

 private:
  std::vector<uint32_t> dense_, sparse_;
  size_t size_ = 0;
};

}  // namespace

Expected<KernelPattern> KernelPattern::create(std::string_view pattern) {
  Expected<std::shared_ptr<Program>> program = Parser(pattern).run();
  if (!program) return program.error().within("not a kir pattern");
  return KernelPattern(std::string(pattern), std::move(*program));
}

size_t KernelPattern::program_size() const { return program_->code.size(); }

bool KernelPattern::search(std::string_view text) const {
  const std::vector<Inst>& code = program_->code;
  const std::vector<ByteSet>& sets = program_->sets;
  size_t n = code.size();
  // Heap only: the stack depth is the same for any text and any pattern.
  SparseSet current(n), next(n);
  std::vector<uint32_t> stack;
  stack.reserve(2 * n + 1);
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  size_t length = text.size();
  // Follow every non-consuming instruction from `pc` at position `pos`; true at Match.
  auto add = [&](SparseSet& set, uint32_t pc, size_t pos) {
    stack.push_back(pc);
    while (!stack.empty()) {
      uint32_t at = stack.back();
      stack.pop_back();
      if (set.contains(at)) continue;
      set.insert(at);
      const Inst& inst = code[at];
      switch (inst.op) {
        case Op::Byte: break;
        case Op::Match: stack.clear(); return true;
        case Op::Jump: stack.push_back(at + static_cast<uint32_t>(inst.x)); break;
        case Op::Split:
          stack.push_back(at + static_cast<uint32_t>(inst.y));
          stack.push_back(at + static_cast<uint32_t>(inst.x));
          break;
        case Op::Begin:
          if (pos == 0) stack.push_back(at + 1);
          break;
        case Op::End:
          if (pos == length) stack.push_back(at + 1);
          break;
        case Op::WordBoundary: {
          bool before = pos > 0 && is_word(bytes[pos - 1]), after = pos < length && is_word(bytes[pos]);
          if (before != after) stack.push_back(at + 1);
          break;
        }
      }
    }
    return false;
  };
  for (size_t pos = 0;; ++pos) {
    if (add(current, 0, pos)) return true;  // a match may start anywhere: a new thread at each position
    if (pos == length) return false;
    unsigned char c = bytes[pos];
    next.clear();
    for (size_t k = 0; k < current.size(); ++k) {
      uint32_t pc = current[k];
      if (code[pc].op == Op::Byte && sets[code[pc].set][c] && add(next, pc + 1, pos + 1)) return true;
    }
    std::swap(current, next);
  }
}

bool KernelPattern::selects(std::string_view mangled) const {
  if (search(mangled)) return true;
  std::string name(mangled);
  std::string demangled = demangle(name);
  return demangled != name && search(demangled);
}

bool KernelPattern::selects(std::string_view mangled, std::string_view demangled) const {
  return search(mangled) || (demangled != mangled && search(demangled));
}

}  // namespace kir
