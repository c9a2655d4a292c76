package main

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Payloads: what an operator sends an orchestration (start's input, an
// event's data) is JSON in almost every application, and a typo in it
// (a missing quote or brace) reaches the code as text it cannot decode, so
// that a paid order fails. The commands that send one check it before they
// connect, and send nothing on a mistake; -raw sends text that is not JSON
// as is. No payload at all (the empty string) is always accepted.

// checkPayload returns a usage error naming what (the flag or argument)
// when text is neither empty nor JSON and raw is false.
func checkPayload(what, text string, raw bool) error {
	if raw || text == "" {
		return nil
	}
	var v any
	err := json.Unmarshal([]byte(text), &v)
	if err == nil {
		return nil
	}
	return usageError{msg: fmt.Sprintf("%s is not JSON (%s); nothing was sent (-raw sends text that is not JSON as is)", what, jsonMistake(err)), cause: err}
}

// jsonMistake says where a JSON text went wrong: the decoder's words, and
// the byte where it stopped when it says.
func jsonMistake(err error) string {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Sprintf("%s, at byte %d", syntax.Error(), syntax.Offset)
	}
	return err.Error()
}

// rawUsage is the help of a command's -raw flag.
func rawUsage(what string) string {
	return "send " + what + " as is: without it, " + what + " must be JSON (or empty), checked before anything is sent"
}
