#include "store/sqlite_db.h"

#include <fmt/format.h>

#include "core/error.h"

namespace calo::store::detail {

Database::Database(const std::filesystem::path& path, int flags) : path_(path) {
  int code = sqlite3_open_v2(path.c_str(), &handle_, flags, nullptr);
  if (code != SQLITE_OK) {
    std::string message = handle_ ? sqlite3_errmsg(handle_) : sqlite3_errstr(code);
    sqlite3_close(handle_);
    handle_ = nullptr;
    throw InputError(
        fmt::format("cannot open run database {}: {}; check that the path exists and is writable",
                    path.string(), message));
  }
  sqlite3_busy_timeout(handle_, 10'000);
  sqlite3_extended_result_codes(handle_, 1);
}

Database::~Database() {
  sqlite3_close(handle_);
}

void Database::check(int code, std::string_view what) const {
  int primary = code & 0xff;
  if (primary == SQLITE_OK || primary == SQLITE_ROW || primary == SQLITE_DONE) return;
  throw RuntimeFailure(
      fmt::format("run database {}: {} failed: {}", path_.string(), what, sqlite3_errmsg(handle_)));
}

void Database::exec(std::string_view sql) {
  std::string text(sql);
  char* error = nullptr;
  int code = sqlite3_exec(handle_, text.c_str(), nullptr, nullptr, &error);
  if (code != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errstr(code);
    sqlite3_free(error);
    throw RuntimeFailure(fmt::format("run database {}: '{}' failed: {}", path_.string(), text, message));
  }
}

int64_t Database::query_int(std::string_view sql, int64_t fallback) {
  Statement statement(*this, sql);
  if (!statement.step()) return fallback;
  return statement.column_int(0);
}

bool Database::has_object(std::string_view name) {
  Statement statement(*this, "SELECT count(*) FROM sqlite_master WHERE name = ?");
  statement.bind(1, name);
  statement.step();
  return statement.column_int(0) > 0;
}

Statement::Statement(Database& db, std::string_view sql) : db_(db) {
  int code = sqlite3_prepare_v3(db.handle(), sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  db.check(code, fmt::format("preparing '{}'", sql));
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

bool Statement::step() {
  int code = sqlite3_step(stmt_);
  if (code == SQLITE_ROW) return true;
  if (code == SQLITE_DONE) return false;
  std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
  sqlite3_reset(stmt_);
  db_.check(code, fmt::format("'{}'", sql));
  return false;
}

void Statement::run() {
  step();
  sqlite3_reset(stmt_);
}

std::string Statement::column_text(int index) const {
  const unsigned char* text = sqlite3_column_text(stmt_, index);
  if (!text) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<std::size_t>(sqlite3_column_bytes(stmt_, index)));
}

}  // namespace calo::store::detail
