package tool

import (
	"encoding/json"
	"strconv"

	"github.com/fluffy-agent/fluffy/internal/jsonname"
	"github.com/fluffy-agent/fluffy/internal/jsonnum"
)

// fastParse is strictParse's single pass over raw: the same values
// (map[string]any, []any, string, float64, bool, nil) without a
// json.Decoder and its tokens. It reports ok=false for anything it does
// not accept, valid or not (errors, numbers out of range, duplicate
// keys, exactly or but for case, nesting too deep), and the caller then
// asks tokenParse, which words the error.
func fastParse(raw []byte) (any, bool) {
	p := fastParser{in: raw}
	p.ws()
	v, ok := p.value(0)
	if !ok {
		return nil, false
	}
	p.ws()
	return v, p.i == len(p.in)
}

type fastParser struct {
	in []byte
	i  int
}

func (p *fastParser) ws() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) value(depth int) (any, bool) {
	if depth > maxArgsDepth || p.i >= len(p.in) {
		return nil, false
	}
	switch c := p.in[p.i]; {
	case c == '{':
		p.i++
		m := map[string]any{}
		var folds map[string]struct{} // the names seen, folded (jsonname.Fold); made at the second
		p.ws()
		if p.i < len(p.in) && p.in[p.i] == '}' {
			p.i++
			return m, true
		}
		for {
			p.ws()
			if p.i >= len(p.in) || p.in[p.i] != '"' {
				return nil, false
			}
			k, ok := p.str()
			if !ok {
				return nil, false
			}
			if _, dup := m[k]; dup {
				return nil, false
			}
			if len(m) > 0 {
				if folds == nil {
					folds = make(map[string]struct{}, 4)
					for k0 := range m {
						folds[jsonname.Fold(k0)] = struct{}{}
					}
				}
				f := jsonname.Fold(k)
				if _, dup := folds[f]; dup {
					return nil, false
				}
				folds[f] = struct{}{}
			}
			p.ws()
			if p.i >= len(p.in) || p.in[p.i] != ':' {
				return nil, false
			}
			p.i++
			p.ws()
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v
			p.ws()
			if p.i >= len(p.in) {
				return nil, false
			}
			switch p.in[p.i] {
			case ',':
				p.i++
				continue
			case '}':
				p.i++
				return m, true
			}
			return nil, false
		}
	case c == '[':
		p.i++
		a := []any{}
		p.ws()
		if p.i < len(p.in) && p.in[p.i] == ']' {
			p.i++
			return a, true
		}
		for {
			p.ws()
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			a = append(a, v)
			p.ws()
			if p.i >= len(p.in) {
				return nil, false
			}
			switch p.in[p.i] {
			case ',':
				p.i++
				continue
			case ']':
				p.i++
				return a, true
			}
			return nil, false
		}
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	for _, lit := range [...]struct {
		text string
		v    any
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if len(p.in)-p.i >= len(lit.text) && string(p.in[p.i:p.i+len(lit.text)]) == lit.text {
			p.i += len(lit.text)
			return lit.v, true
		}
	}
	return nil, false
}

// str reads a string at p.i (a '"'). Plain printable ASCII is taken as it
// is; anything with escapes or other bytes is unquoted by encoding/json,
// so invalid UTF-8 and escapes come out exactly as the tokenizer makes
// them.
func (p *fastParser) str() (string, bool) {
	start := p.i
	p.i++
	plain := true
	for p.i < len(p.in) {
		c := p.in[p.i]
		switch {
		case c == '"':
			p.i++
			if plain {
				return string(p.in[start+1 : p.i-1]), true
			}
			var s string
			if err := json.Unmarshal(p.in[start:p.i], &s); err != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			plain = false
			p.i += 2
			continue
		case c < 0x20:
			return "", false
		case c >= 0x80:
			plain = false
		}
		p.i++
	}
	return "", false
}

// number reads an RFC 8259 number as a float64.
func (p *fastParser) number() (any, bool) {
	start := p.i
	end, _, _, ok := jsonnum.Span(p.in, p.i)
	if !ok {
		return nil, false
	}
	p.i = end
	f, err := strconv.ParseFloat(string(p.in[start:p.i]), 64)
	if err != nil {
		return nil, false
	}
	return f, true
}
