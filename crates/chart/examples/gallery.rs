//! Writes one of each chart, at the default width and at a phone's, to a directory (default
//! `target/chart-gallery`), with an HTML page that shows them inline the way a dashboard would.
//!
//! ```sh
//! cargo run -p idemgate-chart --example gallery -- /tmp/gallery
//! ```

use std::path::PathBuf;

use idemgate_chart::{
    BarLayout, Bars, Colour, Dash, Frame, Gauge, HistogramPanel, LineChart, LinePanel, Mark,
    Series, Style, TimeHistogram, XAxis,
};

const MIN: f64 = 60.0;
const DAY: f64 = 86_400.0;

fn charts(width: f64, fluid: bool) -> Vec<(&'static str, String)> {
    let frame = |id: &str, title: &str| {
        let f = Frame::new(&format!("{id}-{width}"), title).width(width);
        if fluid { f.fluid() } else { f }
    };
    // Claims per second, a dip while a cleanup runs.
    let secs: Vec<String> = (-10..=26).map(|s: i32| s.to_string()).collect();
    let dip = |depth: f64, len: usize, n: usize| -> Vec<f64> {
        (0..n)
            .map(|i| {
                let t = i as f64 - 10.0;
                if (0.0..len as f64).contains(&t) {
                    100.0 - depth * (1.0 - t / len as f64)
                } else {
                    100.0 + 4.0 * ((i as f64) * 1.7).sin()
                }
            })
            .collect()
    };
    let line = LineChart::new(
        frame(
            "cleanup",
            "Claims per second while 2 M expired rows are cleared (64 callers)",
        ),
        XAxis::Categories(secs),
        "seconds from the cleanup's start",
    )
    .panel(
        LinePanel::new("claims/s, % of the idle mean")
            .series(Series::new(
                "one unbounded DELETE (1.3 s)",
                dip(65.0, 2, 15),
            ))
            .series(Series::new("batched sweeper (26.3 s)", dip(25.0, 26, 37)))
            .series(Series::new("partition drop (0.2 s)", dip(30.0, 1, 15)))
            .x_mark(Mark::new(10.0, "cleanup starts"))
            .y_mark(Mark::new(80.0, "80% (batched target)")),
    )
    .render();

    let start = 1_796_119_200.0; // 2026-12-01T10:00:00Z
    let buckets: Vec<String> = (0..12).map(|i| format!("10:{:02}", i * 5)).collect();
    let bars = Bars::new(
        frame("outcomes", "Deliveries by outcome, last hour"),
        buckets,
        "five minutes from (UTC)",
        "deliveries",
    )
    .series(Series::new(
        "claimed",
        (0..12).map(|i| 40.0 + f64::from(i * 7 % 23)),
    ))
    .series(Series::new(
        "duplicate",
        (0..12).map(|i| f64::from(i * 5 % 11)),
    ))
    .series(Series::new("in flight", (0..12).map(|i| f64::from(i % 3))))
    .series(Series::new(
        "late duplicate",
        (0..12).map(|i| f64::from(u8::from(i == 7) * 2)),
    ))
    .render();
    let grouped = Bars::new(
        frame("engines", "Claims per second by engine"),
        vec!["1 caller".into(), "16 callers".into(), "64 callers".into()],
        "concurrent callers",
        "claims/s",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new("sqlite", [3_200.0, 21_000.0, 24_500.0]))
    .series(Series::new("postgres batched", [900.0, 14_000.0, 38_900.0]))
    .series(Series::new(
        "plain statement",
        [1_100.0, 12_000.0, 19_000.0],
    ))
    .render();

    let series = LineChart::new(
        frame("rate", "Deliveries per minute"),
        XAxis::UtcTime,
        "time (UTC)",
    )
    .panel(
        LinePanel::new("deliveries/min")
            .series(Series::xy(
                "stripe-live",
                (0..60).map(|i| {
                    (
                        start + f64::from(i) * 60.0,
                        50.0 + 20.0 * (f64::from(i) / 6.0).sin(),
                    )
                }),
            ))
            .series(Series::xy(
                "github-app",
                (0..60).map(|i| (start + f64::from(i) * 60.0, 20.0 + f64::from(i % 7))),
            )),
    )
    .render();

    let ttl = Style::nth(1).colour(Colour::Vermillion).dash(Dash::Solid);
    let window = Style::nth(0).colour(Colour::Blue).dash(Dash::Dashed);
    let recommended = Style::nth(2).colour(Colour::Green).dash(Dash::Dotted);
    let hist = TimeHistogram::new(
        frame(
            "gaps",
            "Gap between first receipt and each repeated delivery",
        ),
        "gap since first receipt (log scale)",
        "repeated deliveries",
    )
    .panel(
        HistogramPanel::new("stripe-live: 200 deliveries, 100 repeats; verdict: ok")
            .note("gap p50 50m | p90 1h 30m | p99 1h 39m | max 1h 40m")
            .seconds((1..=100).map(|i| f64::from(i) * MIN))
            .mark(Mark::new(3.0 * DAY, "retry window 3d").style(window))
            .mark(Mark::new(7.0 * DAY + 600.0, "TTL = recommended TTL 7d 10m").style(ttl)),
    )
    .panel(
        HistogramPanel::new("fast-bus: 40 repeats, all under a second")
            .seconds((1..=40).map(|i| 0.002 * f64::from(i * i)))
            .mark(Mark::new(3_600.0, "TTL = retry window 1h").style(ttl))
            .mark(Mark::new(4_000.0, "recommended TTL 1h 6m 40s").style(recommended)),
    )
    .render();

    let gauge = Gauge::new(frame("limits", "Live rows against each source's cap"))
        .row("stripe-live", 8_500.0, 10_000.0)
        .row("shop", 11_500.0, 10_000.0)
        .row("bus", 120.0, 10_000.0)
        .render();

    vec![
        ("line", line),
        ("time-series", series),
        ("stacked-bars", bars),
        ("grouped-bars", grouped),
        ("histogram", hist),
        ("gauge", gauge),
    ]
}

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("target/chart-gallery"), PathBuf::from);
    std::fs::create_dir_all(&dir)?;
    for width in [720.0, 420.0] {
        for (name, svg) in charts(width, false) {
            std::fs::write(dir.join(format!("{name}-{width}.svg")), svg)?;
        }
    }
    let mut html = String::from(
        "<!doctype html><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
         <title>idemgate charts</title><style>body{font-family:system-ui,sans-serif;margin:1rem;max-width:960px}\
         svg{display:block;margin:0 0 2rem}</style>\n",
    );
    for (_, svg) in charts(720.0, true) {
        html.push_str(&svg);
    }
    std::fs::write(dir.join("inline.html"), html)?;
    println!("{}", dir.display());
    Ok(())
}
