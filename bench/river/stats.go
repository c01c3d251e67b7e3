package main

import (
	"fmt"
	"slices"
	"time"
)

// setLatencies records the percentiles of the per-unit latencies.
func (r *runResult) setLatencies(ls []time.Duration) {
	slices.Sort(ls)
	r.Timed = len(ls)
	r.P50 = percentile(ls, 0.50)
	r.P99 = percentile(ls, 0.99)
}

// percentile returns the nearest-rank p-th percentile of sorted, or 0 when it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// median returns a result whose every measured field is the median of the runs' (the lower
// middle one for an even count), so one slow run on a shared machine does not move it.
func median(runs []runResult) runResult {
	m := runResult{System: runs[0].System, N: runs[0].N, Workers: runs[0].Workers}
	pick := func(f func(runResult) time.Duration) time.Duration {
		v := make([]time.Duration, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[(len(v)-1)/2]
	}
	m.Elapsed = pick(func(r runResult) time.Duration { return r.Elapsed })
	m.P50 = pick(func(r runResult) time.Duration { return r.P50 })
	m.P99 = pick(func(r runResult) time.Duration { return r.P99 })
	m.Held = int(pick(func(r runResult) time.Duration { return time.Duration(r.Held) }))
	m.Timed = int(pick(func(r runResult) time.Duration { return time.Duration(r.Timed) }))
	m.Conns = int(pick(func(r runResult) time.Duration { return time.Duration(r.Conns) }))
	return m
}

func printHeader() {
	fmt.Printf("%-20s %6s %7s %5s %9s %12s %9s %9s %6s\n", "system", "N", "workers", "held", "seconds", "executions/s", "p50", "p99", "conns")
}

func printRow(label string, r runResult) {
	fmt.Printf("%-20s %6d %7d %5d %9.3f %12.1f %9s %9s %6d\n", label, r.N, r.Workers, r.Held, r.Elapsed.Seconds(), r.Rate(), ms(r.P50), ms(r.P99), r.Conns)
}

// ms formats a duration in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
