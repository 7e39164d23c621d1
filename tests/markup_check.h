// markup_check.h: a test's check that an HTML page (or an SVG) is well-formed enough to render:
// what test_html_report, test_lineup and test_compare ask of every page nibble writes.
#pragma once

#include <regex>
#include <set>
#include <string>
#include <vector>

namespace nibble::test {

/**
 * Checks that every element is closed in order (void HTML elements and `<x/>` excepted), that no
 * `<` or `&` stands loose in text, and that every attribute value is quoted. Returns "" when
 * balanced, else what is wrong and where.
 */
inline std::string markup_problem(const std::string& s) {
  static const std::set<std::string> void_elems = {"meta", "br", "hr", "img", "input", "link"};
  std::vector<std::string> stack;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      if (semi == std::string::npos || semi - i > 8) return "loose & at " + std::to_string(i);
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      if (s[i] == '>') return "loose > at " + std::to_string(i);
      ++i;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      i = s.find("-->", i);
      if (i == std::string::npos) return "unclosed comment";
      i += 3;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return "unclosed tag at " + std::to_string(i);
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.rfind("!DOCTYPE", 0) == 0) continue;
    if (tag.find('<') != std::string::npos) return "'<' inside tag <" + tag + ">";
    // The content of <style> is CSS, not markup.
    if (tag == "style") {
      const size_t close = s.find("</style>", i);
      if (close == std::string::npos) return "unclosed <style>";
      i = close + 8;
      continue;
    }
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name)
        return "</" + name + "> closes <" + (stack.empty() ? std::string("nothing") : stack.back()) + ">";
      stack.pop_back();
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    // Attributes: name="value" pairs only (no unquoted values).
    const std::string attrs = tag.substr(name.size(), tag.size() - name.size() - (self_closing ? 1 : 0));
    static const std::regex attr_re(R"(^(\s+[A-Za-z_:][-A-Za-z0-9_:.]*="[^"]*")*\s*$)");
    if (!std::regex_match(attrs, attr_re)) return "malformed attributes in <" + tag + ">";
    if (self_closing || void_elems.count(name)) continue;
    stack.push_back(name);
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

}  // namespace nibble::test
