package checkpoint

import (
	"context"
	"fmt"
	"maps"
	"reflect"
)

// operator keeps per-key running totals. It aligns barriers: an input
// whose barrier n arrived is not read until every input's has, so the
// snapshot holds exactly the records before barrier n.
func (p *pipeline) operator(ctx context.Context, o int, state keyedState) error {
	inputs := p.toOp[o]
	cases := make([]reflect.SelectCase, len(inputs)+1)
	for i, c := range inputs {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)}
	}
	cases[len(inputs)] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	blocked := 0
	var aligning int64
	out := p.toSink[o]
	emit := func(it item) error {
		select {
		case out <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		chosen, v, _ := reflect.Select(cases)
		if chosen == len(inputs) {
			return ctx.Err()
		}
		it := v.Interface().(item)
		if it.barrier == 0 {
			// A Transform keeps no keyed state: its values pass to the
			// sink, which writes them into the interval's transaction.
			if p.work.builtin() {
				state.count(it.recs)
			}
			if err := emit(it); err != nil {
				return err
			}
			continue
		}
		if blocked > 0 && it.barrier != aligning {
			return fmt.Errorf("operator %d: barrier %d while aligning %d", o, it.barrier, aligning)
		}
		aligning = it.barrier
		cases[chosen].Chan = reflect.Value{} // hold this input
		if blocked++; blocked < len(inputs) {
			continue
		}
		if err := p.ack(ctx, ack{n: aligning, kind: ackOperator, state: maps.Clone(state)}); err != nil {
			return err
		}
		if err := emit(it); err != nil {
			return err
		}
		for i, c := range inputs {
			cases[i].Chan = reflect.ValueOf(c)
		}
		blocked = 0
	}
}

// count adds records to their keys' totals and sets each record's running
// count and total; dead letters pass as they are.
func (s keyedState) count(recs []output) {
	for i := range recs {
		r := &recs[i]
		if r.Dead != nil {
			continue
		}
		st := s[r.Key]
		st.add(r.Amount)
		s[r.Key] = st
		r.Count, r.Total = st.Events, st.Amount
	}
}
