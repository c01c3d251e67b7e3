# The two commands of the README, and the benchmarks.
.PHONY: run test bench

run:
	go run ./cmd/approvald serve

test:
	scripts/test

bench:
	scripts/bench
