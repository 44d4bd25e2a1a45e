package redact

import (
	"regexp"
	"strings"
)

// Mask stands in for a hidden password.
const Mask = "xxxxx"

// schemeRE recognises the start of a URL-shaped DSN.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// DSN returns dsn with its password replaced by Mask:
//
//	mysql://mb:secret@db:3306/app?tls=true  →  mysql://mb:xxxxx@db:3306/app?tls=true
//	redis://:secret@cache:6379/0            →  redis://:xxxxx@cache:6379/0
//	mb:secret@tcp(db:3306)/app              →  mb:xxxxx@tcp(db:3306)/app   (go-sql-driver)
//
// It works on the text alone, so a DSN that does not parse (a password
// with an unescaped '/', '@' or '?') is hidden too: the user ends at the
// first ':' (a user can't hold one), the password at the last '@'. A DSN
// without a password (or without any '@') comes back as it is. Applying
// DSN twice gives the same as once.
func DSN(dsn string) string {
	if m := schemeRE.FindString(dsn); m != "" {
		return m + userinfo(dsn[len(m):])
	}
	return userinfo(dsn)
}

// userinfo masks the password of s = [user[:password]@]rest.
func userinfo(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return s
	}
	colon := strings.IndexByte(s[:at], ':')
	if colon < 0 {
		return s
	}
	return s[:colon+1] + Mask + s[at:]
}

// In free text a DSN ends at white space or an unescaped double quote (a
// DSN quoted with %q or in a JSON string: \" inside it belongs to it). One
// pattern, URL shape first, so that a URL is never also taken for a
// go-sql-driver DSN starting at its scheme.
var dsnRE = regexp.MustCompile(
	// scheme://…
	`[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s"\\]|\\.)*` +
		// or user:password@ followed by a go-sql-driver address ("tcp(",
		// "unix(", "(") or the "/" of the database name.
		`|[^\s:@"'=/\\(),;]*:(?:[^\s"\\]|\\.)*@(?:(?:tcp[46]?|unix|udp)?\(|/)`)

// Text returns s with the password of every DSN-shaped piece in it
// replaced by Mask — a safety net for text that may quote a DSN nobody
// redacted (a library's error, a message written before this rule). It
// can't see a password that holds white space; messages built by this
// module redact their DSNs with DSN in the first place. URL syntax hints
// with an optional part in brackets ("redis://[:password@]host") are not
// DSNs (a URL's user can't hold '[') and are left as they are.
func Text(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return dsnRE.ReplaceAllStringFunc(s, func(m string) string {
		scheme := schemeRE.FindString(m)
		if scheme == "" {
			return userinfo(m)
		}
		if strings.HasPrefix(m[len(scheme):], "[") {
			return m
		}
		return scheme + userinfo(m[len(scheme):])
	})
}
