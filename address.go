package approval

import (
	"context"
	"net/mail"
	"slices"
)

// Addresses: where a person is reached by e-mail (docs/notifications.md, "Addresses"). The
// configuration's address (Routing.Emails) wins when it names one; otherwise, with
// Routing.ProviderEmails, the address the person's identity provider verified at their last
// OIDC sign-in, which the store keeps (person_addresses) so that every replica and every
// worker sees it. Every place that needs a person's address resolves it here: the channels a
// notification is queued on (Routing.notices, from providerEmails), the mail sender
// (Service.EmailAddress), and not sign-in links (see RequestSignin).

// MaxEmailLength is the longest e-mail address stored, in characters (RFC 5321's path limit).
const MaxEmailLength = 254

// CheckEmail checks an e-mail address to be stored: a bare address (alice@example.com, no
// display name, no angle brackets) of one line, at most MaxEmailLength characters. EINVALID
// names what is wrong.
func CheckEmail(email string) error {
	if err := CheckName("e-mail address", email, MaxEmailLength); err != nil {
		return err
	}
	a, err := mail.ParseAddress(email)
	if err != nil || a.Name != "" || a.Address != email {
		return Errorf(EINVALID, "e-mail address %q is not a bare address such as alice@example.com", email)
	}
	return nil
}

// RecordEmail stores email as the address of person, as their identity provider verified it
// at a sign-in (the caller checks that it was verified), or replaces the address stored
// before; the same address again changes nothing. EINVALID for a person who is no name or an
// email that is no bare address, and nothing is stored then.
func (s *Service) RecordEmail(ctx context.Context, person, email string) error {
	if err := CheckName("person", person, MaxNameLength); err != nil {
		return err
	}
	if err := CheckEmail(email); err != nil {
		return err
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := tx.PersonEmailUpsert(ctx, person, email); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// EmailAddress returns the address a mail to person goes to: the configured one when the
// configuration names one, else the stored one when Routing.ProviderEmails is set, else "".
func (s *Service) EmailAddress(ctx context.Context, person string) (string, error) {
	r := s.Routing
	if a := r.Emails[person]; a != "" {
		return a, nil
	}
	if !r.ProviderEmails {
		return "", nil
	}
	stored, err := s.Store.PersonEmails(ctx, []string{person})
	return stored[person], err
}

// providerEmails returns, through read, the stored addresses of the people the
// configuration names no address for, when Routing.ProviderEmails is set; nil otherwise, and
// without a read when everyone has a configured address.
func providerEmails(ctx context.Context, r Routing, read func(context.Context, []string) (map[string]string, error), people []string) (map[string]string, error) {
	if !r.ProviderEmails {
		return nil, nil
	}
	var missing []string
	for _, p := range people {
		if r.Emails[p] == "" && !slices.Contains(missing, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	return read(ctx, missing)
}

// channels returns the channels person is told on: the configured ones, and e-mail when the
// configuration names no address but the provider's is stored (in stored).
func (r Routing) channels(person string, stored map[string]string) []string {
	chs := r.Channels[person]
	if r.ProviderEmails && r.Emails[person] == "" && stored[person] != "" && !slices.Contains(chs, ChannelEmail) {
		chs = append(slices.Clip(chs), ChannelEmail)
	}
	return chs
}
