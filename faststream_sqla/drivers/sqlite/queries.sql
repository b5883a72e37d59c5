-- SQLite's fixed statements, by name (faststream_sqla/drivers/catalogue.py).
-- {message}, {archive}, ... are our quoted table names. Statements run on the sqlite3
-- cursor itself (on the driver's thread) take ? parameters, in order.
-- Statements whose shape varies with the call, or that are built from the table's
-- columns, stay Core or code in driver.py.

-- name: busy_timeout
-- How long a connection waits for another connection's write lock before it fails
-- with SQLITE_BUSY.
PRAGMA busy_timeout = 30000

-- name: journal_mode_wal
-- Readers never wait for a writer, nor a writer for readers. A no-op once the file is
-- in WAL mode; until then it is refused at once while another connection holds the
-- write lock (switch_to_wal in driver.py waits for it and tries again).
PRAGMA journal_mode = WAL

-- name: foreign_keys
-- SQLite enforces foreign keys only when asked, per connection.
PRAGMA foreign_keys = ON

-- name: begin_read
-- A reader's transaction takes no lock up front: the connect probe, the schema
-- check, ping and the backpressure probe never wait for a writer.
BEGIN

-- name: begin_write
-- A writer takes the write lock at once: a deferred transaction that later writes
-- fails at once with SQLITE_BUSY instead of waiting on busy_timeout.
BEGIN IMMEDIATE

-- name: commit
-- Ends a transaction begun on the cursor itself (immediate_transaction).
COMMIT

-- name: rollback
-- Undoes a failed transaction begun on the cursor itself (immediate_transaction).
ROLLBACK

-- name: extend_leases
-- Renews the leases of the (id, token) pairs still claimed by their holder, the pairs
-- as one JSON document (?): a row claimed again since (another token) or settled
-- keeps what it has. The time is the stored text form, microseconds included.
UPDATE {message} AS m SET acquired_at = (strftime('%Y-%m-%d %H:%M:%f', 'now') || '000') FROM json_each(?) AS o WHERE m.id = json_extract(o.value, '$[0]') AND m.claims_count = json_extract(o.value, '$[1]') AND m.state = 'PROCESSING'

-- name: requeue
-- Puts one message to try again back, with its counts, times and error, if its
-- holder (the token) still has it: run once per requeued outcome (executemany).
UPDATE {message} SET state = ?, attempts_count = ?, deliveries_count = ?, first_attempt_at = ?, last_attempt_at = ?, next_attempt_at = COALESCE(?, next_attempt_at), last_error = COALESCE(?, last_error), acquired_at = NULL WHERE id = ? AND claims_count = ? AND state = 'PROCESSING'

-- name: watch_reads_only
-- The wake-up watcher's connection refuses to write: it never takes the write lock
-- that publishers, claims and outcome writes queue for.
PRAGMA query_only = ON

-- name: watch_never_waits
-- The watcher's looks run on the event loop: a look that would wait for a lock fails
-- at once with SQLITE_BUSY instead, and is skipped.
PRAGMA busy_timeout = 0

-- name: data_version
-- Changes on the watcher's connection when any other connection commits to the file:
-- read every few milliseconds, it takes no lock a writer waits on, and only a change
-- is followed by a look at the messages (new_messages).
PRAGMA data_version

-- name: newest_message
-- Where the watcher starts: the newest message id, one descent of the primary key.
-- SQLite commits one writer at a time, so no id below it can still appear.
SELECT COALESCE(MAX(id), 0) FROM {message}

-- name: new_messages
-- The messages newer than the newest the watcher has seen (?), at most ? of them,
-- oldest first: one range of the primary key, a single descent that finds nothing
-- while nothing is new. The third column says whether each may still be claimed: one
-- already claimed needs no wake-up.
SELECT id, queue, state IN ('PENDING', 'RETRYABLE') FROM {message} WHERE id > ? ORDER BY id LIMIT ?

-- name: read_busy_timeout
-- The wait for another connection's lock this connection has now, set back after a
-- bounded read.
PRAGMA busy_timeout
