package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	// modernc.org/sqlite is SQLite compiled to pure Go: no cgo, so the server stays one static
	// binary that cross-compiles like the rest of the SDK.
	_ "modernc.org/sqlite"

	"fastvideo/fastvideo"
)

// schema is the job index. Several server processes may share one database: every job names the
// process that owns it (owner) and until when that owner vouches for it (lease_until, renewed
// while the owner runs); a queued or running job whose lease ran out belongs to a process that
// stopped, and any process may mark it failed. The object column is the job as the API shows it
// (JSON); the other columns are what queries select and sort on.
const schema = `
CREATE TABLE IF NOT EXISTS jobs (
	id          TEXT PRIMARY KEY,
	status      TEXT    NOT NULL,
	created_at  INTEGER NOT NULL, -- unix milliseconds
	finished_at INTEGER,          -- unix milliseconds; NULL while queued or running
	owner       TEXT    NOT NULL,
	lease_until INTEGER NOT NULL, -- unix milliseconds
	file        TEXT,             -- output file name inside the videos folder, once completed
	bytes       INTEGER NOT NULL DEFAULT 0,
	request     TEXT    NOT NULL, -- the fastvideo.Request as JSON
	object      TEXT    NOT NULL  -- the video job object as JSON
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, lease_until);
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at, id);
PRAGMA user_version = 1;
`

// store is the job index in SQLite.
type store struct {
	db    *sql.DB
	owner string
}

// openStore opens (creating if needed) the index in dir. WAL lets readers run while the worker
// writes; busy_timeout makes writers of several processes wait for each other instead of failing.
func openStore(dir, owner string) (*store, error) {
	// A file URL takes an absolute path: a relative one (the default -data, "serve-data") would
	// become the URL's authority and fail to open ("invalid uri authority").
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the job index in %s: %w", dir, err)
	}
	path := filepath.Join(abs, "index.db")
	if err := privateFile(path); err != nil {
		return nil, fmt.Errorf("opening the job index: %w", err)
	}
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: url.Values{
		"_pragma": {"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(NORMAL)"},
		"_txlock": {"immediate"},
	}.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the job index: %w", err)
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating the job index in %s: %w", dir, err)
	}
	return &store{db: db, owner: owner}, nil
}

func (st *store) close() error { return st.db.Close() }

// privateFile creates the index file readable by its owner alone, or takes group and world access
// away from an existing one: it holds every prompt. SQLite gives its -wal and -shm files the main
// file's permissions.
func privateFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err == nil && st.Mode().Perm()&0o077 != 0 {
		err = f.Chmod(st.Mode().Perm() &^ 0o077)
	}
	return errors.Join(err, f.Close())
}

func unixMilli(t time.Time) int64 { return t.UnixMilli() }

// insert records a new queued job owned by this process.
func (st *store) insert(v *Video, req fastvideo.Request, lease time.Time) error {
	reqJSON, err := json.Marshal(req)
	if err != nil {
		return err
	}
	obj, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = st.db.Exec(`INSERT INTO jobs (id, status, created_at, owner, lease_until, request, object)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, v.ID, v.Status, v.CreatedAt*1000, st.owner, unixMilli(lease), reqJSON, obj)
	return err
}

// errNotOwner: another process settled the job (see failAbandoned).
var errNotOwner = errors.New("the job was taken over by another server process")

// update writes a job's object, status and output file, if this process still owns the job.
func (st *store) update(v *Video, file string, bytes int64) error {
	obj, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var finished any
	if v.finished() {
		finished = time.Now().UnixMilli()
	}
	res, err := st.db.Exec(`UPDATE jobs SET status = ?, object = ?, file = ?, bytes = ?, finished_at = ? WHERE id = ? AND owner = ?`,
		v.Status, obj, nullString(file), bytes, finished, v.ID, st.owner)
	if err != nil {
		return err
	}
	if k, err := res.RowsAffected(); err != nil || k == 0 {
		return errors.Join(err, errNotOwner)
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// errNotFound: no such job.
var errNotFound = errors.New("no such video")

// get returns a job and its output file name ("" unless completed).
func (st *store) get(id string) (*Video, string, error) {
	var obj string
	var file sql.NullString
	err := st.db.QueryRow(`SELECT object, file FROM jobs WHERE id = ?`, id).Scan(&obj, &file)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", errNotFound
	}
	if err != nil {
		return nil, "", err
	}
	v, err := decodeVideo(obj)
	return v, file.String, err
}

func decodeVideo(obj string) (*Video, error) {
	v := &Video{}
	if err := json.Unmarshal([]byte(obj), v); err != nil {
		return nil, fmt.Errorf("the job index holds an unreadable job: %w", err)
	}
	return v, nil
}

// list returns up to limit jobs in creation order (newest first unless ascending), after the job
// with id after when given, and whether more follow.
func (st *store) list(limit int, after string, ascending bool) ([]*Video, bool, error) {
	order, cmp := "DESC", "<"
	if ascending {
		order, cmp = "ASC", ">"
	}
	query := `SELECT object FROM jobs`
	var args []any
	if after != "" {
		query += fmt.Sprintf(` WHERE (created_at, id) %s (SELECT created_at, id FROM jobs WHERE id = ?)`, cmp)
		args = append(args, after)
	}
	query += fmt.Sprintf(` ORDER BY created_at %s, id %s LIMIT ?`, order, order)
	args = append(args, limit+1)
	rows, err := st.db.Query(query, args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var out []*Video
	for rows.Next() {
		var obj string
		if err := rows.Scan(&obj); err != nil {
			return nil, false, err
		}
		v, err := decodeVideo(obj)
		if err != nil {
			return nil, false, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// renewLeases extends this process's claim on its queued and running jobs.
func (st *store) renewLeases(until time.Time) error {
	_, err := st.db.Exec(`UPDATE jobs SET lease_until = ? WHERE owner = ? AND status IN ('queued', 'in_progress')`,
		unixMilli(until), st.owner)
	return err
}

// failAbandoned marks failed every queued or running job whose owner stopped without finishing
// it: its lease ran out, or dead says its process is gone. It returns how many it marked. The
// UPDATE repeats the lease it read, so a job whose owner renewed it in the meantime is left alone.
func (st *store) failAbandoned(now time.Time, dead func(owner string) bool) (int, error) {
	type candidate struct {
		obj, owner string
		lease      int64
	}
	rows, err := st.db.Query(`SELECT object, owner, lease_until FROM jobs WHERE status IN ('queued', 'in_progress') AND owner != ?`,
		st.owner)
	if err != nil {
		return 0, err
	}
	var found []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.obj, &c.owner, &c.lease); err != nil {
			rows.Close()
			return 0, err
		}
		if c.lease < unixMilli(now) || dead(c.owner) {
			found = append(found, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range found {
		marked, err := st.failOne(c.obj, c.lease, now)
		if err != nil {
			return n, err
		}
		if marked {
			n++
		}
	}
	return n, nil
}

// failOne marks one abandoned job failed unless its row changed since it was read.
func (st *store) failOne(obj string, lease int64, now time.Time) (bool, error) {
	v, err := decodeVideo(obj)
	if err != nil {
		return false, err
	}
	was := v.Status
	v.fail(now, &APIError{Code: "server_restarted", Message: fmt.Sprintf(
		"the server process that owned this job stopped while it was %s; submit it again", was)})
	out, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	// Settling a job takes it over, so that its former owner, should it still be alive after all,
	// cannot overwrite the verdict (update writes only the owner's jobs).
	res, err := st.db.Exec(`UPDATE jobs SET status = ?, object = ?, finished_at = ?, owner = ? WHERE id = ? AND status = ? AND lease_until = ?`,
		v.Status, out, unixMilli(now), st.owner, v.ID, was, lease)
	if err != nil {
		return false, err
	}
	k, err := res.RowsAffected()
	return k > 0, err
}

// ownerIsDead tells whether the process an owner names (see newOwner) has ended: only provable
// on this host, where a pid that no longer exists, or that is now this process, is gone.
func ownerIsDead(owner string) bool {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return false
	}
	host, _ := os.Hostname()
	pid, err := strconv.Atoi(parts[1])
	if parts[0] != host || err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return true // the owner is not this process (its own jobs are never candidates): it was an earlier one
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// expired returns the finished jobs to delete under the keep policy: those finished before
// cutoff (when maxAge is set), then the oldest completed ones until the outputs fit in maxBytes
// (when set).
func (st *store) expired(ctx context.Context, k keepPolicy, now time.Time) ([]string, error) {
	var ids []string
	if k.maxAge > 0 {
		rows, err := st.db.QueryContext(ctx, `SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ?`,
			unixMilli(now.Add(-k.maxAge)))
		if err != nil {
			return nil, err
		}
		ids, err = scanIDs(rows, ids)
		if err != nil {
			return nil, err
		}
	}
	if k.maxBytes > 0 {
		rows, err := st.db.QueryContext(ctx, `SELECT id FROM (SELECT id, finished_at,
			SUM(bytes) OVER (ORDER BY finished_at DESC, id DESC) AS newer_bytes FROM jobs WHERE status = 'completed')
			WHERE newer_bytes > ? ORDER BY finished_at`, k.maxBytes)
		if err != nil {
			return nil, err
		}
		ids, err = scanIDs(rows, ids)
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func scanIDs(rows *sql.Rows, ids []string) ([]string, error) {
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// remove deletes a finished job's row and returns its output file name (empty if none). A
// queued or running job is left alone: its owner removes it when it finishes.
func (st *store) remove(id string) (file string, err error) {
	var f sql.NullString
	err = st.db.QueryRow(`DELETE FROM jobs WHERE id = ? AND finished_at IS NOT NULL RETURNING file`, id).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errNotFound
	}
	return f.String, err
}

// hasFile tells whether a completed job owns the output file name.
// adopt records a finished output whose job lost its index write (the process stopped, or the write
// failed, after the video was renamed into place): the job, still queued, in progress or settled as
// failed with no file, becomes completed with it. It reports whether a job took the file.
func (st *store) adopt(id, file string, size int64, now time.Time) (bool, error) {
	var obj string
	err := st.db.QueryRow(`SELECT object FROM jobs WHERE id = ? AND file IS NULL AND status IN ('queued', 'in_progress', 'failed')`, id).Scan(&obj)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	v, err := decodeVideo(obj)
	if err != nil {
		return false, err
	}
	v.Status, v.Progress, v.Stage, v.Error = statusCompleted, 100, "", nil
	if v.CompletedAt == nil {
		v.CompletedAt = fastvideo.Ptr(now.Unix())
	}
	out, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	res, err := st.db.Exec(`UPDATE jobs SET status = ?, object = ?, file = ?, bytes = ?, finished_at = ? WHERE id = ? AND file IS NULL`,
		statusCompleted, out, file, size, now.UnixMilli(), id)
	if err != nil {
		return false, err
	}
	k, err := res.RowsAffected()
	return k > 0, err
}

func (st *store) hasFile(name string) (bool, error) {
	var n int
	err := st.db.QueryRow(`SELECT COUNT(*) FROM jobs WHERE file = ?`, name).Scan(&n)
	return n > 0, err
}
