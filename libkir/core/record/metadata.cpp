// Writing a record's metadata through its field table (kir/record/metadata.hpp).
#include "kir/record/metadata.hpp"

namespace kir::record::metadata {

MapWriter::MapWriter(MsgpackWriter& w, const Table& table, uint32_t version, MapWriter* parent)
    : w_(w), table_(table), version_(version), parent_(parent), start_(w.size()) {}

void MapWriter::fail(const Field& f, const std::string& message) {
  if (status_) status_ = Error(std::string("metadata ") + table_.name + "." + f.key + ": " + message);
}

bool MapWriter::enter(const Field& f, Type type) {
  uint32_t at = next_;
  while (at < table_.count && &table_[at] != &f) ++at;
  if (at == table_.count) {
    fail(f, "not a field of this map, or written out of order");
    return false;
  }
  if (f.type != type) {
    fail(f, std::string("a ") + type_name(f.type) + " field written as " + type_name(type));
    return false;
  }
  if (!f.in_version(version_)) {
    fail(f, "not in format version " + std::to_string(version_));
    return false;
  }
  for (uint32_t skipped = next_; skipped < at; ++skipped)
    if (table_[skipped].required_in(version_)) fail(table_[skipped], "left out");
  next_ = at + 1, ++written_;
  w_.key(f.key);
  return true;
}

void MapWriter::str(const Field& f, std::string_view value) {
  Type type = f.type == Type::choice || f.type == Type::hash ? f.type : Type::str;
  if (!enter(f, type)) return;
  if (type == Type::hash && (value.size() != 32 || value.find_first_not_of("0123456789abcdef") != value.npos))
    fail(f, "not 32 lowercase hex digits");
  if (type == Type::choice) {
    bool known = false;
    for (const char* const* c = f.choices; *c; ++c) known = known || value == *c;
    if (!known) fail(f, "'" + std::string(value) + "' is not one of its choices");
  }
  w_.str(value);
}

void MapWriter::sint(const Field& f, int64_t value) {
  if (enter(f, Type::sint)) w_.sint(value);
}

void MapWriter::uint(const Field& f, uint64_t value) {
  if (!enter(f, Type::uint)) return;
  if (value < f.low || value > f.high)
    fail(f, std::to_string(value) + " is not from " + std::to_string(f.low) + " to " + std::to_string(f.high));
  w_.uint(value);
}

void MapWriter::number(const Field& f, double value) {
  if (enter(f, Type::number)) w_.f64(value);
}

void MapWriter::boolean(const Field& f, bool value) {
  if (enter(f, Type::boolean)) w_.boolean(value);
}

void MapWriter::nil(const Field& f) {
  if (!enter(f, f.type)) return;
  if (!f.nullable) fail(f, "nil, which it cannot be");
  w_.nil();
}

void MapWriter::dims(const Field& f, const std::array<uint32_t, 3>& xyz) {
  if (!enter(f, Type::dims)) return;
  w_.array(3);
  for (uint32_t v : xyz) w_.uint(v);
}

void MapWriter::bins(const Field& f, const std::vector<std::vector<uint8_t>>& values) {
  if (!enter(f, Type::bins)) return;
  w_.array(uint32_t(values.size()));
  for (const std::vector<uint8_t>& v : values) w_.bin(v.data(), v.size());
}

void MapWriter::chunks(const Field& f, const std::vector<Hash128>& names) {
  if (!enter(f, Type::chunks)) return;
  w_.array(uint32_t(names.size()));
  for (const Hash128& h : names) w_.str(h.hex());
}

MapWriter MapWriter::map(const Field& f) {
  enter(f, Type::map);
  return MapWriter(w_, *f.table, version_, this);
}

void MapWriter::list(const Field& f, uint32_t count) {
  if (enter(f, Type::maps)) w_.array(count);
}

MapWriter MapWriter::item(const Field& f) { return MapWriter(w_, *f.table, version_, this); }

Status MapWriter::end() {
  for (; next_ < table_.count; ++next_)
    if (table_[next_].required_in(version_)) fail(table_[next_], "left out");
  w_.insert_map(start_, written_);
  if (parent_ && !status_ && parent_->status_) parent_->status_ = status_;
  return status_;
}

}  // namespace kir::record::metadata
