package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// auditPageSize is how many entries one page of the audit log shows.
const auditPageSize = 100

// auditView is the audit log page: newest first, paged by sequence
// number (Before), filtered by session, kind and time.
type auditView struct {
	Entries               []auditRow
	Session, Kind, Since  string
	Before, Older, Newest uint64
	Checkpoint            *audit.Checkpoint
	CheckpointErr         string
	Error                 string
}

type auditRow struct {
	Seq     uint64
	Time    time.Time
	Session string
	Kind    string
	Actor   string
	Payload string
}

func payloadText(p any) string {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return "(payload does not encode: " + err.Error() + ")"
	}
	return string(b)
}

func (s *Server) auditPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := auditView{Session: q.Get("session"), Kind: q.Get("kind"), Since: q.Get("since")}
	if s.o.Log == nil {
		v.Error = "the audit log is not available on this console"
		s.render(w, r, http.StatusOK, "audit", "Audit log", v)
		return
	}
	v.Before, _ = strconv.ParseUint(q.Get("before"), 10, 64)
	f := audit.Filter{Session: v.Session, Kind: audit.Kind(v.Kind), Limit: auditPageSize + 1, Last: true}
	if v.Since != "" {
		t, err := time.ParseInLocation("2006-01-02T15:04", v.Since, time.Local)
		if err != nil {
			if t, err = time.ParseInLocation("2006-01-02", v.Since, time.Local); err != nil {
				v.Error = "since: want YYYY-MM-DD or YYYY-MM-DDTHH:MM"
			}
		}
		f.Since = t
	}
	// Newest first, a page at a time: the newest auditPageSize+1 entries
	// below Before tell whether an older page exists.
	var rows []auditRow
	var err error
	if v.Before == 0 {
		err = s.o.Log.Entries(r.Context(), f, func(e audit.Entry) error {
			rows = append(rows, auditRow{Seq: e.Seq, Time: e.Time, Session: e.Session, Kind: string(e.Kind), Actor: e.Actor})
			return nil
		})
	} else {
		rows, err = s.auditBefore(r, f, v.Before)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(rows) > auditPageSize {
		rows = rows[len(rows)-auditPageSize:]
		v.Older = rows[0].Seq
	}
	for i := len(rows) - 1; i >= 0; i-- {
		v.Entries = append(v.Entries, rows[i])
	}
	if cp, err := s.o.Log.Checkpoint(r.Context()); err == nil {
		v.Checkpoint = &cp
	} else {
		v.CheckpointErr = err.Error()
	}
	s.render(w, r, http.StatusOK, "audit", "Audit log", v)
}

// auditBefore reads the auditPageSize+1 entries matching f just below
// sequence number before, ascending.
func (s *Server) auditBefore(r *http.Request, f audit.Filter, before uint64) ([]auditRow, error) {
	f.Last, f.Limit = false, 0
	if before > auditPageSize+1 {
		f.After = before - auditPageSize - 2
	}
	var rows []auditRow
	for {
		rows = rows[:0]
		// No entry at or past before is read: the window is bounded
		// on both sides.
		f.Limit = int(before - f.After - 1)
		err := s.o.Log.Entries(r.Context(), f, func(e audit.Entry) error {
			if e.Seq < before {
				rows = append(rows, auditRow{Seq: e.Seq, Time: e.Time, Session: e.Session, Kind: string(e.Kind), Actor: e.Actor})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		// A filter may match few entries in the window: widen it
		// (doubling) until the page is full or the log's start is in it.
		if len(rows) > auditPageSize || f.After == 0 {
			return rows, nil
		}
		span := before - f.After
		if f.After > span {
			f.After -= span
		} else {
			f.After = 0
		}
	}
}

// entryView is one entry with its payload and inclusion proof.
type entryView struct {
	Row      auditRow
	Proof    *proofView
	ProofErr string
}

type proofView struct {
	LeafIndex  uint64
	Chain      string
	Hashes     []string
	Checkpoint string
	Verified   bool
	VerifyErr  string
}

func (s *Server) auditEntry(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 || s.o.Log == nil {
		s.renderStatus(w, r, http.StatusNotFound, "Not found", "no such entry")
		return
	}
	var found *audit.Entry
	err = s.o.Log.Entries(r.Context(), audit.Filter{After: seq - 1, Limit: 1}, func(e audit.Entry) error {
		if e.Seq == seq {
			found = &e
		}
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if found == nil {
		s.renderStatus(w, r, http.StatusNotFound, "Not found", "no entry "+strconv.FormatUint(seq, 10))
		return
	}
	v := entryView{Row: auditRow{Seq: found.Seq, Time: found.Time, Session: found.Session, Kind: string(found.Kind), Actor: found.Actor, Payload: payloadText(found.Payload)}}
	p, err := s.o.Log.Prove(r.Context(), seq)
	if err != nil {
		v.ProofErr = err.Error()
	} else {
		pv := &proofView{LeafIndex: p.LeafIndex, Chain: base64.StdEncoding.EncodeToString(p.Chain), Checkpoint: string(p.Checkpoint.Note)}
		for _, h := range p.Hashes {
			pv.Hashes = append(pv.Hashes, base64.StdEncoding.EncodeToString(h))
		}
		if err := audit.VerifyInclusion(p); err != nil {
			pv.VerifyErr = err.Error()
		} else {
			pv.Verified = true
		}
		v.Proof = pv
	}
	s.render(w, r, http.StatusOK, "entry", "Audit entry "+strconv.FormatUint(seq, 10), v)
}

// ReaderLog is an AuditLog over an audit log reader and the verifier key
// of its signed checkpoints.
type ReaderLog struct {
	R        *audit.Reader
	Verifier string
}

// Entries implements AuditLog.
func (l ReaderLog) Entries(ctx context.Context, f audit.Filter, fn func(audit.Entry) error) error {
	return l.R.Entries(ctx, f, fn)
}

// Prove implements AuditLog.
func (l ReaderLog) Prove(ctx context.Context, seq uint64) (audit.InclusionProof, error) {
	return l.R.Prove(ctx, seq, l.Verifier, nil)
}

// Checkpoint implements AuditLog.
func (l ReaderLog) Checkpoint(ctx context.Context) (audit.Checkpoint, error) {
	return l.R.NewestCheckpoint(ctx, l.Verifier)
}

var _ AuditLog = ReaderLog{}
