#include "tokenizer/merge_encoders.h"

#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvserve::tokenizer {
namespace {

// One piece of the text being merged: bytes [offset, offset + size) of the text, linked to
// its neighbours. A merged-away piece keeps size 0.
struct Symbol {
  int prev = -1;
  int next = -1;
  size_t offset = 0;
  size_t size = 0;
};

// Splits `text` into UTF-8 characters (by lead byte, as llama.cpp does), linked in order.
std::vector<Symbol> SplitChars(std::string_view text) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    Symbol s;
    s.offset = offset;
    s.size = std::min(Utf8SequenceLength(text[offset]), text.size() - offset);
    offset += s.size;
    s.prev = static_cast<int>(symbols.size()) - 1;
    s.next = offset == text.size() ? -1 : static_cast<int>(symbols.size()) + 1;
    symbols.push_back(s);
  }
  return symbols;
}

// Merges `right` into `left` (its next neighbour).
void MergeInto(std::vector<Symbol>& symbols, int left, int right) {
  Symbol& l = symbols[left];
  Symbol& r = symbols[right];
  l.size += r.size;
  r.size = 0;
  l.next = r.next;
  if (r.next >= 0) symbols[r.next].prev = left;
}

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void Encode(std::vector<int32_t>* out) {
    symbols_ = SplitChars(text_);
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) TryAddBigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      const Symbol& l = symbols_[b.left];
      const Symbol& r = symbols_[b.right];
      // Stale entry: one side already merged elsewhere.
      if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
      MergeInto(symbols_, b.left, b.right);
      TryAddBigram(symbols_[b.left].prev, b.left);
      TryAddBigram(b.left, symbols_[b.left].next);
    }
    for (int i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next) Resegment(i, out);
  }

 private:
  struct Bigram {
    int left;
    int right;
    float score;
    size_t size;
    // Priority queue order: higher score first, then the leftmost.
    bool operator<(const Bigram& o) const {
      return score < o.score || (score == o.score && left > o.left);
    }
  };

  std::string_view Text(const Symbol& s) const { return text_.substr(s.offset, s.size); }

  void TryAddBigram(int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols_[left];
    const std::string_view text = text_.substr(l.offset, l.size + symbols_[right].size);
    const std::optional<int32_t> id = vocab_.FindToken(text);
    if (!id) return;
    queue_.push(Bigram{left, right, vocab_.TokenScore(*id), text.size()});
    rev_merge_[std::string(text)] = {left, right};
  }

  // Emits the token for symbol `i`, else re-splits it along the merge that built it, else
  // falls back to byte tokens.
  void Resegment(int i, std::vector<int32_t>* out) {
    const std::string_view text = Text(symbols_[i]);
    if (const std::optional<int32_t> id = vocab_.FindToken(text)) {
      out->push_back(*id);
      return;
    }
    const auto it = rev_merge_.find(std::string(text));
    // (A piece never re-splits into itself; the guard keeps a hostile vocab from looping.)
    if (it == rev_merge_.end() || it->second.first == i || it->second.second == i) {
      for (const char c : text) {
        if (std::optional<int32_t> id = vocab_.ByteToken(static_cast<uint8_t>(c))) {
          out->push_back(*id);
        } else if (vocab_.unk_id()) {
          out->push_back(*vocab_.unk_id());  // llama.cpp would throw here
        }
      }
      return;
    }
    Resegment(it->second.first, out);
    Resegment(it->second.second, out);
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram> queue_;
  std::unordered_map<std::string, std::pair<int, int>> rev_merge_;
};

class BpeWordMerger {
 public:
  explicit BpeWordMerger(const Vocab& vocab) : vocab_(vocab) {}

  // Merges one pre-tokenized word; appends the surviving pieces as string_views into `word`.
  void Merge(std::string_view word, std::vector<std::string_view>* pieces) {
    if (vocab_.ignore_merges() && vocab_.FindToken(word)) {
      pieces->push_back(word);
      return;
    }
    word_ = word;
    symbols_ = SplitChars(word);
    queue_ = {};
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) TryAddBigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      const Symbol& l = symbols_[b.left];
      const Symbol& r = symbols_[b.right];
      if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;  // stale
      MergeInto(symbols_, b.left, b.right);
      TryAddBigram(symbols_[b.left].prev, b.left);
      TryAddBigram(b.left, symbols_[b.left].next);
    }
    for (const Symbol& s : symbols_) {
      if (s.size > 0) pieces->push_back(word.substr(s.offset, s.size));
    }
  }

 private:
  struct Bigram {
    int left;
    int right;
    int32_t rank;
    size_t size;
    // Priority queue order: lowest rank first, then the leftmost.
    bool operator<(const Bigram& o) const {
      return rank > o.rank || (rank == o.rank && left > o.left);
    }
  };

  void TryAddBigram(int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    const std::optional<int32_t> rank =
        vocab_.MergeRank(word_.substr(l.offset, l.size), word_.substr(r.offset, r.size));
    if (!rank) return;
    queue_.push(Bigram{left, right, *rank, l.size + r.size});
  }

  const Vocab& vocab_;
  std::string_view word_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram> queue_;
};

}  // namespace

void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  SpmSession(vocab, text).Encode(out);
}

void BpeEncode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  const std::vector<std::string> words = PreTokenize(vocab.pre_tokenizer(), text);
  BpeWordMerger merger(vocab);
  std::vector<std::string_view> pieces;
  for (const std::string& word : words) {
    pieces.clear();
    merger.Merge(word, &pieces);
    for (const std::string_view piece : pieces) {
      if (const std::optional<int32_t> id = vocab.FindToken(piece)) {
        out->push_back(*id);
        continue;
      }
      // Not a token: each byte of the piece's text that is itself a token (llama.cpp).
      for (const char c : piece) {
        if (const std::optional<int32_t> id = vocab.FindToken(std::string_view(&c, 1))) {
          out->push_back(*id);
        }
      }
    }
  }
}

}  // namespace kvserve::tokenizer
