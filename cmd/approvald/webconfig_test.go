package main

import (
	"log/slog"
	"testing"
)

// TestWebConfigTargets: the pages get each action's target URL, so an approval's page can
// say what approving does.
func TestWebConfigTargets(t *testing.T) {
	svc := newService(Config{Actions: []ActionConfig{{Name: "payout", URL: "https://payments.internal/v1/payouts"}}}, slog.New(slog.DiscardHandler), nil)
	cfg := svc.webConfig(nil, nil)
	if got := cfg.Targets["payout"]; got != "https://payments.internal/v1/payouts" {
		t.Fatalf("Targets[payout] = %q, want the action's URL", got)
	}
	if _, ok := cfg.Targets["deploy"]; ok {
		t.Fatalf("Targets has deploy, which has no target")
	}
}
