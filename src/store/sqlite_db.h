// store internal header: thin RAII wrappers over the SQLite C API (connection, prepared statement).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace calo::store::detail {

/// One SQLite connection; throws RuntimeFailure with the path and SQLite's message on errors.
class Database {
 public:
  /// Opens `path` with sqlite3_open_v2 `flags`; InputError if it cannot be opened.
  Database(const std::filesystem::path& path, int flags);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  /// Runs one or more statements without results.
  void exec(std::string_view sql);
  /// Runs a query whose first row's first column is an integer; `fallback` if no row.
  int64_t query_int(std::string_view sql, int64_t fallback = 0);
  /// True if a table or index called `name` exists.
  bool has_object(std::string_view name);
  /// Throws RuntimeFailure naming `what` and the database when `code` is not an expected success code.
  void check(int code, std::string_view what) const;
  /// The raw handle.
  sqlite3* handle() const { return handle_; }
  /// The file path.
  const std::filesystem::path& path() const { return path_; }

 private:
  sqlite3* handle_ = nullptr;
  std::filesystem::path path_;
};

/// A prepared statement bound to a Database; reset after each step cycle by the caller.
class Statement {
 public:
  /// Prepares `sql` on `db` (persistent: it is reused many times).
  Statement(Database& db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  /// Binds an integer to 1-based parameter `index`.
  void bind(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
  /// Binds a double.
  void bind(int index, double value) { sqlite3_bind_double(stmt_, index, value); }
  /// Binds text (copied by SQLite).
  void bind(int index, std::string_view value) {
    sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
  }
  /// Binds NULL.
  void bind_null(int index) { sqlite3_bind_null(stmt_, index); }
  /// Steps once: true if a row is available, false when done; throws on error.
  bool step();
  /// Runs a statement without results to completion and resets it.
  void run();
  /// Resets for re-execution (bindings are kept).
  void reset() { sqlite3_reset(stmt_); }
  /// The raw statement, for hot loops.
  sqlite3_stmt* raw() const { return stmt_; }
  /// Integer column of the current row.
  int64_t column_int(int index) const { return sqlite3_column_int64(stmt_, index); }
  /// Double column of the current row.
  double column_double(int index) const { return sqlite3_column_double(stmt_, index); }
  /// True if the column of the current row is NULL.
  bool column_is_null(int index) const { return sqlite3_column_type(stmt_, index) == SQLITE_NULL; }
  /// Text column of the current row (empty for NULL).
  std::string column_text(int index) const;

 private:
  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace calo::store::detail
