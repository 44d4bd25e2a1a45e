package benchmarks

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours of the chart.
var (
	colThroughput = color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff}
	colReference  = color.RGBA{R: 0x9a, G: 0x9a, B: 0x9a, A: 0xff}
	colDup        = color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff}
	colLoss       = color.RGBA{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff}
	colP50        = color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff}
	colP95        = color.RGBA{R: 0x81, G: 0x72, B: 0xb3, A: 0xff}
	colP99        = color.RGBA{R: 0x64, G: 0x4a, B: 0x3a, A: 0xff}
)

// chartRow is one line of the chart; the three panels share the rows.
type chartRow struct {
	name          string
	rate          float64
	reference     bool // raw consume, no-guarantee pipeline, baseline: grey, no fault or latency data
	ran           bool // fault run judged
	dups, losses  float64
	p50, p95, p99 float64
}

// writeChart writes the chart as SVG to path.
func writeChart(path string, r *Results) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteChart(f, r, "svg"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteChart draws three panels side by side, one row per strategy (plus
// raw consume, the no-guarantee pipeline and the baseline): throughput,
// duplicates and losses after the fault run, and latency percentiles;
// format is svg or png.
func WriteChart(out io.Writer, r *Results, format string) error {
	var rows []chartRow
	if r.Raw.EventsPerSec > 0 {
		rows = append(rows, chartRow{name: "raw consume", rate: r.Raw.EventsPerSec, reference: true})
	}
	if ng := r.NoGuarantee; ng != nil && ng.EventsPerSec > 0 {
		rows = append(rows, chartRow{name: "no-guarantee pipeline", rate: ng.EventsPerSec, reference: true})
	}
	if r.Baseline != nil {
		rows = append(rows, chartRow{name: "per-record baseline", rate: r.Baseline.EventsPerSec, reference: true})
	}
	for _, row := range r.Rows {
		rows = append(rows, chartRow{name: row.Name, rate: row.Clean.EventsPerSec, ran: row.Fault.Ran,
			dups: float64(row.Fault.Duplicates), losses: float64(row.Fault.Losses),
			p50: row.Clean.Latency.P50, p95: row.Clean.Latency.P95, p99: row.Clean.Latency.P99})
	}
	// The first row at the top.
	slices.Reverse(rows)
	names := make([]string, len(rows))
	for i, row := range rows {
		names[i] = row.name
	}
	n := len(rows)
	barH := vg.Points(16)

	tp := plot.New()
	tp.Title.Text = "Throughput, clean run (events/s)"
	tp.X.Min = 0
	if err := hbars(tp, rows, []series{
		{"", colThroughput, func(c chartRow) (float64, bool) { return c.rate, c.rate > 0 && !c.reference }},
		{"", colReference, func(c chartRow) (float64, bool) { return c.rate, c.reference }},
	}, barH, func(v float64) string { return si(v) }); err != nil {
		return err
	}
	tp.NominalY(names...)
	tp.X.Tick.Marker = labelTicks(si)

	faults := plot.New()
	faults.Title.Text = fmt.Sprintf("After %d kills + crash points (%s)", r.Settings.Crashes, r.FaultValidity)
	faults.X.Min = 0
	faults.X.Label.Text = "events"
	if err := hbars(faults, rows, []series{
		{"duplicates", colDup, func(c chartRow) (float64, bool) { return c.dups, c.ran }},
		{"losses", colLoss, func(c chartRow) (float64, bool) { return c.losses, c.ran }},
	}, barH/2, func(v float64) string { return group(int64(v)) }); err != nil {
		return err
	}
	faults.NominalY(names...)
	faults.X.Tick.Marker = labelTicks(func(v float64) string { return group(int64(v)) })
	faults.Legend.Top = true

	lat := plot.New()
	lat.Title.Text = fmt.Sprintf("Latency at %.0f events/s (ms)", r.Settings.LatencyRate)
	lat.X.Min = 0
	if err := hbars(lat, rows, []series{
		{"p50", colP50, func(c chartRow) (float64, bool) { return c.p50, c.p99 > 0 }},
		{"p95", colP95, func(c chartRow) (float64, bool) { return c.p95, c.p99 > 0 }},
		{"p99", colP99, func(c chartRow) (float64, bool) { return c.p99, c.p99 > 0 }},
	}, barH/3, func(v float64) string { return group(int64(v)) }); err != nil {
		return err
	}
	lat.NominalY(names...)
	lat.X.Tick.Marker = labelTicks(func(v float64) string { return group(int64(v)) })
	lat.Legend.Top = true

	w := vg.Points(1200)
	h := vg.Points(float64(n)*26 + 110)
	var canvas vg.CanvasWriterTo
	switch format {
	case "svg":
		canvas = vgsvg.New(w, h)
	case "png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("chart format %q: want svg or png", format)
	}
	dc := draw.New(canvas)
	title := fmt.Sprintf("microbatch bench: %s events (%s), %d partitions, interval %s; %d CPUs, %s", group(r.Workload.Events),
		orDash(string(r.Workload.Format)), r.Workload.Partitions, r.Settings.Interval, r.Machine.CPUs, r.Machine.Go)
	top := plot.New() // a title line over the panels
	top.Title.Text = title
	top.HideAxes()
	titleH := vg.Points(24)
	full := draw.Crop(dc, 0, 0, 0, 0)
	top.Draw(draw.Crop(full, 0, 0, h-titleH, 0))
	body := draw.Crop(full, 0, 0, 0, -titleH)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Points(12), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(12)}
	plots := [][]*plot.Plot{{tp, faults, lat}}
	for i, c := range plot.Align(plots, tiles, body)[0] {
		plots[0][i].Draw(c)
	}
	_, err := canvas.WriteTo(out)
	return err
}

// series is one bar per row, where ok.
type series struct {
	name  string
	color color.Color
	value func(chartRow) (v float64, ok bool)
}

// hbars adds horizontal bars of each series to p, grouped per row (the
// first series on top), with the value written at the end of each bar and
// "n/a" on rows where no series has one.
func hbars(p *plot.Plot, rows []chartRow, ss []series, width vg.Length, label func(float64) string) error {
	var maxV float64
	for _, s := range ss {
		for _, row := range rows {
			if v, ok := s.value(row); ok {
				maxV = max(maxV, v)
			}
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	p.X.Max = maxV * 1.3 // room for the labels
	for i, s := range ss {
		offset := (vg.Length(len(ss)-1)/2 - vg.Length(i)) * width
		vals := make(plotter.Values, len(rows))
		var lx plotter.XYs
		var ls []string
		for j, row := range rows {
			if v, ok := s.value(row); ok {
				vals[j] = v
				lx = append(lx, plotter.XY{X: v, Y: float64(j)})
				ls = append(ls, label(v))
			} else if i == 0 && !rowHasAny(row, ss) {
				lx = append(lx, plotter.XY{X: 0, Y: float64(j)})
				ls = append(ls, "n/a")
			}
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bc.Horizontal = true
		bc.Color = s.color
		bc.LineStyle.Width = 0
		bc.Offset = offset
		p.Add(bc)
		if s.name != "" {
			p.Legend.Add(s.name, bc)
		}
		if len(lx) == 0 {
			continue
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: lx, Labels: ls})
		if err != nil {
			return err
		}
		l.Offset = vg.Point{X: vg.Points(3), Y: offset}
		for k := range l.TextStyle {
			l.TextStyle[k].Font.Size = vg.Points(7)
			l.TextStyle[k].YAlign = draw.YCenter
		}
		p.Add(l)
	}
	return nil
}

func rowHasAny(row chartRow, ss []series) bool {
	for _, s := range ss {
		if _, ok := s.value(row); ok {
			return true
		}
	}
	return false
}

// labelTicks are the default ticks, labelled by label.
func labelTicks(label func(float64) string) plot.Ticker {
	return plot.TickerFunc(func(min, max float64) []plot.Tick {
		ts := plot.DefaultTicks{}.Ticks(min, max)
		for i := range ts {
			if ts[i].Label != "" {
				ts[i].Label = label(ts[i].Value)
			}
		}
		return ts
	})
}

// si writes v with a k/M suffix.
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
