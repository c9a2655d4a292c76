package cosmossql

// likeToken is one element of a compiled LIKE pattern.
type likeToken struct {
	anyRun  bool // %: any run of characters, possibly empty
	anyOne  bool // _: exactly one character
	literal rune // an ordinary (or escaped) character
	set     *likeSet
}

// likeSet is a bracket expression: [abc], [a-f], [^a-f].
type likeSet struct {
	negated bool
	ranges  [][2]rune
}

func (s *likeSet) contains(r rune) bool {
	in := false
	for _, rg := range s.ranges {
		if rg[0] <= r && r <= rg[1] {
			in = true
			break
		}
	}
	return in != s.negated
}

// likeMatch reports whether s matches a Cosmos LIKE pattern: % and _ as in
// SQL, [..] character sets, and an optional escape character that makes the
// next pattern character literal. Matching is case-sensitive.
func likeMatch(s, pattern string, escape rune, hasEscape bool) bool {
	tokens := compileLike([]rune(pattern), escape, hasEscape)
	return matchLike([]rune(s), tokens)
}

func compileLike(p []rune, escape rune, hasEscape bool) []likeToken {
	var tokens []likeToken
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case hasEscape && c == escape && i+1 < len(p):
			i++
			tokens = append(tokens, likeToken{literal: p[i]})
		case c == '%':
			tokens = append(tokens, likeToken{anyRun: true})
		case c == '_':
			tokens = append(tokens, likeToken{anyOne: true})
		case c == '[':
			set, end, ok := compileLikeSet(p, i)
			if !ok {
				tokens = append(tokens, likeToken{literal: c}) // an unclosed [ is literal
				continue
			}
			tokens = append(tokens, likeToken{set: set})
			i = end
		default:
			tokens = append(tokens, likeToken{literal: c})
		}
	}
	return tokens
}

// compileLikeSet reads the bracket expression starting at p[start] == '['
// and returns the index of its closing ']'.
func compileLikeSet(p []rune, start int) (*likeSet, int, bool) {
	set := &likeSet{}
	i := start + 1
	if i < len(p) && p[i] == '^' {
		set.negated = true
		i++
	}
	for ; i < len(p); i++ {
		if p[i] == ']' {
			return set, i, true
		}
		lo, hi := p[i], p[i]
		if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
			hi = p[i+2]
			i += 2
		}
		set.ranges = append(set.ranges, [2]rune{lo, hi})
	}
	return nil, 0, false
}

// matchLike is a dynamic programme over (characters consumed, tokens
// consumed), so patterns with many % cannot blow up exponentially.
func matchLike(s []rune, tokens []likeToken) bool {
	// reach[j] reports whether the first j tokens can match the prefix read so far.
	reach := make([]bool, len(tokens)+1)
	reach[0] = true
	closeOverAnyRuns(reach, tokens)
	for _, r := range s {
		next := make([]bool, len(tokens)+1)
		for j, t := range tokens {
			if !reach[j] {
				continue
			}
			switch {
			case t.anyRun:
				next[j] = true // % absorbs r and stays
			case t.anyOne, t.set != nil && t.set.contains(r), t.set == nil && t.literal == r:
				next[j+1] = true
			}
		}
		closeOverAnyRuns(next, tokens)
		reach = next
	}
	return reach[len(tokens)]
}

// closeOverAnyRuns lets each % match the empty string.
func closeOverAnyRuns(reach []bool, tokens []likeToken) {
	for j, t := range tokens {
		if reach[j] && t.anyRun {
			reach[j+1] = true
		}
	}
}
