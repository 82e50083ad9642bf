package tokenizer

import "fastvideo/internal/tokenizer/addedvocab"

// addedToken is one entry of tokenizer.json's added_tokens, with the flags
// that change how it is matched.
type addedToken struct {
	ID         int
	Content    string
	Pattern    string // Content, NFC-normalized when Normalized is set
	SingleWord bool
	LStrip     bool
	RStrip     bool
	Normalized bool
	Special    bool
}

// vocab is how the added-token scan sees the token.
func (t *addedToken) vocab() addedvocab.Token {
	return addedvocab.Token{ID: t.ID, Pattern: t.Pattern, SingleWord: t.SingleWord, LStrip: t.LStrip, RStrip: t.RStrip}
}
