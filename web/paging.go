package web

import (
	"net/url"
	"strings"
)

// pageSize is how many rows one page of any list shows.
const pageSize = 25

// maxBack bounds how many earlier pages a list remembers for its Previous link; past it the
// oldest are forgotten, and Previous from there leads back to the first page.
const maxBack = 20

// firstPage stands for the first page's cursor ("") in a list's trail of earlier pages.
const firstPage = "0"

// pager is the position of one list of a page in the store's cursor paging: the cursor of
// the page shown (?<name>=) and the cursors of the pages before it (?<name>b=, joined by
// "."; cursors are base64url and hold no dot), so that a list has Next and Previous links
// while the store pages forward only. Every other query parameter of the page, its filters
// and the other lists' positions, is kept in the links.
type pager struct {
	query url.Values // the page's query
	path  string
	name  string
	// Cursor is the cursor of the page shown, "" for the first.
	Cursor string
	back   []string
	next   string
}

// pagerOf reads list name's position from the query of the page at path.
func pagerOf(path string, q url.Values, name string) *pager {
	p := &pager{query: q, path: path, name: name, Cursor: q.Get(name)}
	if b := q.Get(name + "b"); b != "" && p.Cursor != "" {
		p.back = strings.Split(b, ".")
		if len(p.back) > maxBack {
			p.back = p.back[len(p.back)-maxBack:]
		}
	}
	return p
}

// link is the page's address with this list at cursor with the trail back.
func (p *pager) link(cursor string, back []string) string {
	v := url.Values{}
	for k, vs := range p.query {
		if k != p.name && k != p.name+"b" && k != "done" && len(vs) > 0 && vs[0] != "" {
			v.Set(k, vs[0])
		}
	}
	if cursor != "" {
		v.Set(p.name, cursor)
		if len(back) > 0 {
			v.Set(p.name+"b", strings.Join(back, "."))
		}
	}
	if len(v) == 0 {
		return p.path
	}
	return p.path + "?" + v.Encode()
}

// Next is the link to the next page, "" on the last.
func (p *pager) Next() string {
	if p.next == "" {
		return ""
	}
	cur := p.Cursor
	if cur == "" {
		cur = firstPage
	}
	back := append(append([]string(nil), p.back...), cur)
	if len(back) > maxBack {
		back = back[len(back)-maxBack:]
	}
	return p.link(p.next, back)
}

// Prev is the link to the page before, "" on the first.
func (p *pager) Prev() string {
	if p.Cursor == "" {
		return ""
	}
	if len(p.back) == 0 {
		return p.link("", nil)
	}
	prev := p.back[len(p.back)-1]
	if prev == firstPage {
		prev = ""
	}
	return p.link(prev, p.back[:len(p.back)-1])
}

// Paged tells whether the list has more than one page.
func (p *pager) Paged() bool { return p.Cursor != "" || p.next != "" }
