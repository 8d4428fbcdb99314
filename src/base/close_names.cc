// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/close_names.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace trainprof::base {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Levenshtein distance, stopping early past `cap` (names are short; the
// candidates may be many).
size_t edit_distance(const std::string& a, const std::string& b, size_t cap) {
  if (a.size() > b.size() + cap || b.size() > a.size() + cap) return cap + 1;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0], smallest = i;
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
      smallest = std::min(smallest, row[j]);
    }
    if (smallest > cap) return cap + 1;
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> close_names(std::string_view word, const std::vector<std::string>& candidates,
                                     size_t limit) {
  std::string w = lower(word);
  if (w.empty()) return {};
  size_t cap = std::max<size_t>(1, w.size() / 3);
  std::vector<std::pair<size_t, const std::string*>> found;  // (distance, name)
  for (const std::string& name : candidates) {
    std::string n = lower(name);
    if (n == w) continue;
    size_t d = edit_distance(w, n, cap);
    bool contains = w.size() >= 3 && (n.find(w) != std::string::npos || w.find(n) != std::string::npos);
    if (d <= cap || contains)
      found.emplace_back(
          d <= cap ? d : cap + 1 + (n.size() > w.size() ? n.size() - w.size() : w.size() - n.size()), &name);
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [distance, name] : found) {
    if (out.size() == limit) break;
    if (std::find(out.begin(), out.end(), *name) == out.end()) out.push_back(*name);
  }
  return out;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::vector<std::string> names = close_names(word, candidates);
  if (names.empty()) return "";
  std::string out = " (did you mean ";
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : ", ") + names[i];
  return out + "?)";
}

}  // namespace trainprof::base
