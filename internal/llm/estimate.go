package llm

// Token estimation for when no provider count is at hand: about four
// bytes a token for English and code, plus a small overhead per message
// and per block. It over-counts dense non-ASCII text less than it
// under-counts it, so budgets stay conservative only with a margin; the
// agent keeps one.

const (
	bytesPerToken   = 4
	messageOverhead = 4
	blockOverhead   = 3
	toolOverhead    = 10
	imageTokens     = 1000
)

// EstimateTokens estimates the tokens of a string.
func EstimateTokens(s string) int { return (len(s) + bytesPerToken - 1) / bytesPerToken }

// EstimateMessage estimates the tokens of one message.
func EstimateMessage(m Message) int {
	n := messageOverhead
	for _, b := range m.Content {
		n += blockOverhead
		switch b.Type {
		case BlockImage:
			n += imageTokens
		default:
			n += EstimateTokens(b.Text) + EstimateTokens(b.Name) + EstimateTokens(string(b.Args))
		}
	}
	return n
}

// EstimateRequest estimates the input tokens of a request.
func EstimateRequest(r Request) int {
	n := EstimateTokens(r.System)
	for _, t := range r.Tools {
		n += toolOverhead + EstimateTokens(t.Name) + EstimateTokens(t.Description) + EstimateTokens(string(t.Schema))
	}
	for _, m := range r.Messages {
		n += EstimateMessage(m)
	}
	return n
}
