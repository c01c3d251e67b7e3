package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkConfigText walks a YAML configuration against Config before it is decoded, so that a
// mistake is told in the file's terms, with its line, the setting's full name and the form it
// accepts ("line 3: unknown setting \"lisen\" (did you mean \"listen\"?)", "line 4:
// workers.lease: \"30\" is not a duration; write 30s or 1m"), rather than in Go's ("field
// lisen not found in type main.Config"). Only values of typed settings (durations, numbers,
// switches) are quoted; a string setting may hold a secret and is never quoted.
func checkConfigText(text string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil // a syntax error: the decoder's message names the line
	}
	if len(doc.Content) == 0 {
		return nil // an empty file
	}
	return checkConfigNode(doc.Content[0], reflect.TypeFor[Config](), "")
}

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

// checkConfigNode checks the node n, the setting path, against the Go type t.
func checkConfigNode(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // left as it is: the default
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem() // an optional section (web.oidc) is checked as the section itself
	}
	name := path
	if name == "" {
		name = "the configuration"
	}
	switch {
	case reflect.PointerTo(t).Implements(unmarshalerType):
		return nil // the type checks its own forms (a group is a list or a map)
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: %s is %s; write \"name: value\" lines", n.Line, name, nodeKind(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkConfigNode(n.Content[i+1], t.Elem(), joinSetting(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: %s is %s; write a duration such as 30s or 1m", n.Line, name, nodeKind(n))
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			return fmt.Errorf("line %d: %s: %q is not a duration; write 30s or 1m (units: ms, s, m, h)", n.Line, name, n.Value)
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: %s is %s; write settings as \"name: value\" lines", n.Line, name, nodeKind(n))
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			f, ok := fields[key.Value]
			if !ok {
				return unknownSetting(key, path, fields)
			}
			if err := checkConfigNode(value, f.Type, joinSetting(path, key.Value)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("line %d: %s is %s; write a list, such as [a, b] or one \"- item\" line each", n.Line, name, nodeKind(n))
		}
		for i, item := range n.Content {
			if err := checkConfigNode(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case n.Kind != yaml.ScalarNode:
		return fmt.Errorf("line %d: %s is %s; write a single value", n.Line, name, nodeKind(n))
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		if n.ShortTag() != "!!int" {
			return fmt.Errorf("line %d: %s: %q is not a whole number; write digits, such as 4", n.Line, name, n.Value)
		}
	case t.Kind() == reflect.Float64:
		if tag := n.ShortTag(); tag != "!!float" && tag != "!!int" {
			return fmt.Errorf("line %d: %s: %q is not a number; write one such as 2 or 0.2", n.Line, name, n.Value)
		}
	case t.Kind() == reflect.Bool:
		if n.ShortTag() != "!!bool" {
			return fmt.Errorf("line %d: %s: %q is not true or false", n.Line, name, n.Value)
		}
	}
	return nil
}

// yamlFields maps a struct's YAML names to its fields.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := make(map[string]reflect.StructField)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
			out[name] = f
		}
	}
	return out
}

// unknownSetting is the error of a key that names no setting: the closest name when one is
// close enough to be a typo, the list of names otherwise.
func unknownSetting(key *yaml.Node, path string, fields map[string]reflect.StructField) error {
	where := ""
	if path != "" {
		where = " in " + path
	}
	best, bestDist := "", 3 // a typo is at most two edits away
	var names []string
	for name := range fields {
		names = append(names, name)
		if d := editDistance(key.Value, name); d < bestDist || (d == bestDist && name < best) {
			best, bestDist = name, d
		}
	}
	if best != "" {
		return fmt.Errorf("line %d: unknown setting %q%s (did you mean %q?)", key.Line, key.Value, where, best)
	}
	slices.Sort(names)
	return fmt.Errorf("line %d: unknown setting %q%s; the settings there are %s", key.Line, key.Value, where, strings.Join(names, ", "))
}

func joinSetting(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// nodeKind says in words what a YAML node is.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map of settings"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a single value"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// checkSQLitePath says plainly why a SQLite database at the URL's path could not be opened or
// created, before SQLite answers "unable to open database file (14)": the directory is
// missing or is not a directory, or the process may not create files in it (SQLite creates
// the database and its -wal and -shm files there), or may not write the file itself. nil when
// none of these is found.
func checkSQLitePath(databaseURL string) error {
	path, _, _ := strings.Cut(databaseURL, "?")
	if p, ok := strings.CutPrefix(path, "file:"); ok {
		if strings.HasPrefix(p, "//") { // file://host/path or file:///path
			if i := strings.IndexByte(p[2:], '/'); i >= 0 {
				p = p[2+i:]
			}
		}
		if u, err := url.PathUnescape(p); err == nil {
			p = u
		}
		path = p
	}
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("database_url: the directory %s does not exist; create it, or point database_url at a file in an existing directory", dir)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("database_url: the directory %s cannot be read: permission denied for this user", dir)
	case err != nil:
		return fmt.Errorf("database_url: the directory %s: %w", dir, err)
	case !info.IsDir():
		return fmt.Errorf("database_url: %s is not a directory, so the database %s cannot be created in it", dir, path)
	}
	probe, err := os.CreateTemp(dir, ".approvald-write-check-*")
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("database_url: this user may not create files in the directory %s (permission denied); SQLite creates the database and its -wal and -shm files there", dir)
		}
		return fmt.Errorf("database_url: cannot create files in the directory %s: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	if f, err := os.OpenFile(path, os.O_RDWR, 0); errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("database_url: this user may not write the database file %s (permission denied)", path)
	} else if err == nil {
		f.Close()
	}
	return nil
}
