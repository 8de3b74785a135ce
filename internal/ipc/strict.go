package ipc

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/jsonname"
)

// DuplicateKeyError: a JSON object names one member twice. encoding/json
// keeps the last value, and matches member names to struct fields without
// regard to case, so {"id":1,"id":2} and {"id":1,"ID":2} would each be
// read as one field set twice: whatever checked the first value would not
// be checking what is used. Such input is refused at any depth.
type DuplicateKeyError struct {
	Key, First string // as written; First differs from Key only in case
}

func (e *DuplicateKeyError) Error() string {
	if e.First != e.Key {
		return fmt.Sprintf("duplicate key %q (as %q before: JSON member names match without regard to case)", e.Key, e.First)
	}
	return fmt.Sprintf("duplicate key %q", e.Key)
}

// checkKeys refuses a JSON value with an object that names a member
// twice, exactly or but for case. data must be one valid JSON value (the
// decoder has accepted it): the scan relies on that and only tracks
// strings, objects and arrays.
func checkKeys(data []byte) error {
	// stack holds, per open object, the names seen (by folded form);
	// nil for an array.
	var stack []map[string]string
	var isObj []bool
	wantKey := false
	for i := 0; i < len(data); {
		switch data[i] {
		case '{':
			stack = append(stack, nil)
			isObj = append(isObj, true)
			wantKey = true
			i++
		case '[':
			stack = append(stack, nil)
			isObj = append(isObj, false)
			wantKey = false
			i++
		case '}', ']':
			stack, isObj = stack[:len(stack)-1], isObj[:len(isObj)-1]
			wantKey = false
			i++
		case ',':
			wantKey = len(isObj) > 0 && isObj[len(isObj)-1]
			i++
		case '"':
			j := stringEnd(data, i)
			if wantKey {
				k, err := jsonKey(data[i:j])
				if err != nil {
					return err
				}
				top := len(stack) - 1
				if stack[top] == nil {
					stack[top] = map[string]string{}
				}
				f := jsonname.Fold(k)
				if first, dup := stack[top][f]; dup {
					return &DuplicateKeyError{Key: k, First: first}
				}
				stack[top][f] = k
				wantKey = false
			}
			i = j
		default:
			i++
		}
	}
	return nil
}

// stringEnd returns the index after the JSON string starting at data[i].
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(data)
}

// jsonKey returns a quoted member name as encoding/json reads it: escapes
// resolved and invalid UTF-8 replaced, so two names the decoder would see
// as one compare equal here.
func jsonKey(q []byte) (string, error) {
	plain := true
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return "", err
	}
	return s, nil
}
