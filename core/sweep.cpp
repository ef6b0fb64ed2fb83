// Expanding `sweep:` grids. A sweep axis is a key path into the scenario document
// (`wan[*].bandwidth`, `compression.wan_activations`, `clusters[1].nodes`) and a list of
// values; every combination becomes one scenario document.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/limits.hpp"
#include "core/scenario.hpp"
#include "core/text.hpp"

namespace hgsim::core {
namespace {

struct Segment {
  std::string key;
  enum class Index { none, one, all } index = Index::none;
  std::size_t position = 0;  // SIZE_MAX: more digits than any list can have
};

// Whether two key paths set one value: their keys agree as far as both go, with indices
// that can name the same entry ([*] names every one; no index, the whole list).
bool overlaps(const std::vector<Segment>& a, const std::vector<Segment>& b) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i].key != b[i].key) return false;
    const bool any = a[i].index != Segment::Index::one || b[i].index != Segment::Index::one;
    if (!any && a[i].position != b[i].position) return false;
  }
  return true;
}

std::optional<std::vector<Segment>> split_path(const std::string& path) {
  std::vector<Segment> out;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Segment seg;
    std::size_t bracket = part.find('[');
    seg.key = part.substr(0, bracket);
    if (seg.key.empty()) return std::nullopt;
    if (bracket != std::string::npos) {
      if (part.back() != ']') return std::nullopt;
      std::string inside = part.substr(bracket + 1, part.size() - bracket - 2);
      if (inside == "*") {
        seg.index = Segment::Index::all;
      } else {
        if (inside.empty() || inside.find_first_not_of("0123456789") != std::string::npos)
          return std::nullopt;
        seg.index = Segment::Index::one;
        // Nine digits at most are read; more name no entry of any list hgsim accepts.
        seg.position = inside.size() > 9 ? SIZE_MAX : std::stoul(inside);
      }
    }
    out.push_back(seg);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return out;
}

// Sets every node that `segments[i..]` names under `n` to `value`. Missing mapping keys
// are created (a sweep may set a key the base scenario leaves at its default).
bool apply(Node& n, const std::vector<Segment>& segments, std::size_t i, const Node& value,
           std::string& why) {
  const Segment& seg = segments[i];
  if (!n.is_mapping()) {
    if (!n.is_null()) {
      why = "'" + excerpt(seg.key) + "' is looked up in something that is not a mapping";
      return false;
    }
    n.kind = Node::Kind::mapping;
  }
  Node* child = n.find(seg.key);
  if (child == nullptr) {
    if (seg.index != Segment::Index::none) {
      why = "the scenario has no list '" + excerpt(seg.key) + "'";
      return false;
    }
    n.entries.emplace_back(seg.key, Node{});
    n.key_locations.push_back(value.where);
    child = &n.entries.back().second;
  }
  std::vector<Node*> targets;
  if (seg.index == Segment::Index::none) {
    targets.push_back(child);
  } else if (!child->is_sequence()) {
    why = "'" + excerpt(seg.key) + "' is not a list";
    return false;
  } else if (seg.index == Segment::Index::all) {
    for (Node& item : child->items) targets.push_back(&item);
  } else if (seg.position < child->items.size()) {
    targets.push_back(&child->items[seg.position]);
  } else {
    why = "'" + seg.key + "' has " + std::to_string(child->items.size()) + " entries, no [" +
          (seg.position == SIZE_MAX ? std::string("N] of more than 9 digits")
                                    : std::to_string(seg.position) + "]");
    return false;
  }
  for (Node* t : targets) {
    if (i + 1 == segments.size()) {
      *t = value;
    } else if (!apply(*t, segments, i + 1, value, why)) {
      return false;
    }
  }
  return true;
}

}  // namespace

SweepGrid::SweepGrid(const Node& document, Diagnostics& diags)
    : document_(std::make_shared<const Node>(document)), base_(document) {
  if (Node* s = base_.find("sweep")) *s = Node{};  // drop the grid from every point
  const Node* sweep = document_->find("sweep");
  if (sweep == nullptr || !sweep->is_mapping() || sweep->entries.empty()) return;

  // The axes accepted so far: a value swept by two axes would take one of them silently.
  struct Swept {
    std::vector<Segment> segments;
    std::string path;
    SourceLocation at;
  };
  std::vector<Swept> swept;
  // One axis checked against the base document; false (reported) when it cannot be swept.
  auto check_axis = [&](const std::string& path, const Node& values, const SourceLocation& at,
                        const std::string& key_path) {
    auto segments = split_path(path);
    if (!segments) {
      diags.error(at, key_path, "'" + excerpt(path) + "' is not a key path",
                  "write keys joined by '.', with [N] or [*] for lists, e.g. wan[*].bandwidth");
      return false;
    }
    for (const Swept& other : swept)
      if (overlaps(*segments, other.segments)) {
        diags.error(at, key_path,
                    "'" + excerpt(path) + "' sets what '" + excerpt(other.path) + "'" +
                        (other.at.line > 0 ? " (line " + std::to_string(other.at.line) + ")"
                                           : std::string()) +
                        " already sweeps",
                    "sweep each value by one axis; to vary values together, put their axes "
                    "in one zip group");
        return false;
      }
    if (segments->front().key == "sweep" || segments->front().key == "name") {
      diags.error(at, key_path, "'" + excerpt(segments->front().key) + "' cannot be swept");
      return false;
    }
    if (!values.is_sequence() || values.items.empty()) return false;  // the scenario reader says
    Node probe = base_;
    std::string why;
    if (!apply(probe, *segments, 0, values.items.front(), why)) {
      diags.error(at, key_path, "cannot sweep '" + excerpt(path) + "': " + why);
      return false;
    }
    swept.push_back({*segments, path, at});
    return true;
  };
  // A zip group: axes of one length that vary together.
  auto add_group = [&](const Node& group, const std::string& group_path) {
    if (!group.is_mapping() || group.entries.empty()) return false;  // the scenario reader says
    Dimension dim;
    bool ok = true;
    for (std::size_t i = 0; i < group.entries.size(); ++i) {
      const auto& [path, values] = group.entries[i];
      const std::string key_path = child_path(group_path, path);
      if (!check_axis(path, values, group.key_locations[i], key_path)) {
        ok = false;
        continue;
      }
      if (dim.axes.empty()) dim.length = values.items.size();
      if (values.items.size() != dim.length) {
        diags.error(group.key_locations[i], key_path,
                    "a zip group's axes vary together, so they need as many values each: '" +
                        excerpt(path) + "' has " + std::to_string(values.items.size()) + ", '" +
                        excerpt(dim.axes.front().path) + "' has " + std::to_string(dim.length),
                    "give every axis of the group the same number of values, or move '" +
                        excerpt(path) + "' out of the zip group to combine it with every value");
        ok = false;
        continue;
      }
      dim.axes.push_back({path, &values});
    }
    if (ok && !dim.axes.empty()) dimensions_.push_back(std::move(dim));
    return ok;
  };

  bool ok = true;
  for (std::size_t i = 0; i < sweep->entries.size(); ++i) {
    const auto& [path, values] = sweep->entries[i];
    if (path == "zip") {
      if (values.is_sequence()) {
        for (std::size_t g = 0; g < values.items.size(); ++g)
          ok = add_group(values.items[g], "sweep.zip[" + std::to_string(g) + "]") && ok;
      } else {
        ok = add_group(values, "sweep.zip") && ok;
      }
      continue;
    }
    if (!check_axis(path, values, sweep->key_locations[i], child_path("sweep", path))) {
      ok = false;
      continue;
    }
    dimensions_.push_back({{{path, &values}}, values.items.size()});
  }
  if (!ok) {
    dimensions_.clear();
    size_ = 0;
    return;
  }
  // The grid's size before any point is made: a product of a few long lists is huge.
  const std::int64_t limit = limits().sweep_points;
  std::int64_t count = 1;
  for (const Dimension& d : dimensions_)
    count = checked_mul(count, static_cast<std::int64_t>(d.length)).value_or(INT64_MAX);
  if (count > limit) {
    std::string product;
    for (const Dimension& d : dimensions_)
      product += (product.empty() ? "" : " x ") + std::to_string(d.length);
    diags.error(sweep->where, "sweep",
                "the sweep grid has " +
                    (count == INT64_MAX ? std::string("more than 2^63") : std::to_string(count)) +
                    " points (" + product + ")",
                "split the sweep into several files, or " +
                    limit_hint("HGSIM_MAX_SWEEP_POINTS", static_cast<double>(limit)));
    dimensions_.clear();
    size_ = 0;
    return;
  }
  size_ = static_cast<std::size_t>(count);
}

std::vector<std::string> SweepGrid::axis_paths() const {
  std::vector<std::string> out;
  for (const Dimension& d : dimensions_)
    for (const Axis& a : d.axes) out.push_back(a.path);
  return out;
}

std::vector<std::size_t> SweepGrid::digits(std::size_t k) const {
  // Mixed radix, the last dimension fastest: digit i is (k / product of later lengths) % n_i.
  std::vector<std::size_t> digit(dimensions_.size());
  std::size_t rest = k;
  for (std::size_t i = dimensions_.size(); i-- > 0;) {
    digit[i] = rest % dimensions_[i].length;
    rest /= dimensions_[i].length;
  }
  return digit;
}

SweepPoint SweepGrid::point(std::size_t k) const {
  const std::vector<std::size_t> digit = digits(k);
  SweepPoint p{{}, base_};
  for (std::size_t i = 0; i < dimensions_.size(); ++i)
    for (const Axis& axis : dimensions_[i].axes) {
      const Node& value = axis.values->items[digit[i]];
      std::string why;
      apply(p.document, *split_path(axis.path), 0, value, why);  // checked in the constructor
      p.settings.emplace_back(axis.path, to_json(value).dump());
    }
  return p;
}

std::vector<std::pair<std::string, std::string>> SweepGrid::settings(std::size_t k) const {
  const std::vector<std::size_t> digit = digits(k);
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < dimensions_.size(); ++i)
    for (const Axis& axis : dimensions_[i].axes)
      out.emplace_back(axis.path, to_json(axis.values->items[digit[i]]).dump());
  return out;
}

std::vector<SweepPoint> sweep_points(const Node& document, Diagnostics& diags) {
  const SweepGrid grid(document, diags);
  std::vector<SweepPoint> points;
  for (std::size_t k = 0; k < grid.size(); ++k) points.push_back(grid.point(k));
  return points;
}

}  // namespace hgsim::core
