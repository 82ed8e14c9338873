//! Where labels go so that no two overlap: rows for the labels of vertical marks, vertical
//! nudging for labels at the ends of lines, and thinning for axis ticks.

/// A horizontal extent, `[x0, x1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Span {
    pub x0: f64,
    pub x1: f64,
}

impl Span {
    fn overlaps(self, other: Span, gap: f64) -> bool {
        self.x0 < other.x1 + gap && other.x0 < self.x1 + gap
    }

    fn holds(self, x: f64, pad: f64) -> bool {
        x > self.x0 - pad && x < self.x1 + pad
    }
}

/// Where a vertical mark's label went: its row above the plot (0 nearest the plot; the mark's
/// line rises to its row) and its extent (the text starts at `span.x0`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RowPlace {
    pub row: usize,
    pub span: Span,
}

/// Space between a mark's line and its label, and between neighbouring labels.
const PAD: f64 = 4.0;
const GAP: f64 = 8.0;

/// Places the labels of vertical marks at `x` (each `(x, label width)`) in rows above the plot,
/// inside `[lo, hi]`: a label sits right of its line or else left of it, in the lowest row where
/// it overlaps no other label, crosses no line that rises through that row, and whose own line
/// crosses no label below it. Marks at the same `x` stack.
pub(crate) fn mark_rows(marks: &[(f64, f64)], lo: f64, hi: f64) -> Vec<RowPlace> {
    let mut order: Vec<usize> = (0..marks.len()).collect();
    order.sort_by(|a, b| marks[*a].0.total_cmp(&marks[*b].0));
    let mut placed: Vec<Option<RowPlace>> = vec![None; marks.len()];
    for &k in &order {
        let (x, w) = marks[k];
        let inside = |s: &Span| s.x0 >= lo && s.x1 <= hi;
        let right = Span {
            x0: x + PAD,
            x1: x + PAD + w,
        };
        let left = Span {
            x0: x - PAD - w,
            x1: x - PAD,
        };
        let mut sides: Vec<Span> = [right, left].into_iter().filter(inside).collect();
        if sides.is_empty() {
            // Wider than the room on either side: as near as fits.
            let x0 = right.x0.min(hi - w).max(lo);
            sides.push(Span { x0, x1: x0 + w });
        }
        let others = || {
            placed
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.map(|p| (i, p)))
        };
        let ok = |row: usize, span: Span| {
            others().all(|(i, p)| {
                let line = marks[i].0;
                let same_row = p.row == row && p.span.overlaps(span, GAP);
                let crosses_their_line = p.row >= row && span.holds(line, 2.0);
                let my_line_crosses = p.row < row && p.span.holds(x, 2.0);
                !(same_row || crosses_their_line || my_line_crosses)
            })
        };
        let found = (0..marks.len()).find_map(|row| {
            sides
                .iter()
                .find(|s| ok(row, **s))
                .map(|s| RowPlace { row, span: *s })
        });
        // Nothing clean (crowded marks): a fresh row on top; no label overlaps another there.
        let place = found.unwrap_or_else(|| RowPlace {
            row: others().map(|(_, p)| p.row + 1).max().unwrap_or(0),
            span: sides[0],
        });
        placed[k] = Some(place);
    }
    placed.into_iter().flatten().collect()
}

/// A label to nudge vertically: its extent, wanted centre and height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Slot {
    pub span: Span,
    pub y: f64,
    pub h: f64,
}

/// Centres for `slots` as near their wanted ones as can be without two horizontally
/// overlapping labels overlapping vertically, inside `[top, bottom]` where there is room
/// (without room, overlap is avoided and the bottom bound given up).
pub(crate) fn spread(slots: &[Slot], top: f64, bottom: f64, gap: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by(|a, b| slots[*a].y.total_cmp(&slots[*b].y));
    let mut y: Vec<f64> = slots
        .iter()
        .map(|s| s.y.max(top + s.h / 2.0).min(bottom - s.h / 2.0))
        .collect();
    let apart = |a: &Slot, b: &Slot| (a.h + b.h) / 2.0 + gap;
    let down = |y: &mut Vec<f64>| {
        for (n, &i) in order.iter().enumerate() {
            for &j in &order[..n] {
                if slots[i].span.overlaps(slots[j].span, 0.0) {
                    y[i] = y[i].max(y[j] + apart(&slots[i], &slots[j]));
                }
            }
        }
    };
    down(&mut y);
    for (n, &i) in order.iter().enumerate().rev() {
        y[i] = y[i].min(bottom - slots[i].h / 2.0);
        for &j in &order[n + 1..] {
            if slots[i].span.overlaps(slots[j].span, 0.0) {
                y[i] = y[i].min(y[j] - apart(&slots[i], &slots[j]));
            }
        }
    }
    // Pushed above the top: back down, overlap-free first.
    for (i, s) in slots.iter().enumerate() {
        y[i] = y[i].max(top + s.h / 2.0);
    }
    down(&mut y);
    y
}

/// The centre nearest `slot.y` inside `[top, bottom]` where `slot` overlaps none of `placed`
/// (each a slot and its centre); outside the bounds only when there is no room inside.
pub(crate) fn nearest_free(
    placed: &[(Slot, f64)],
    slot: Slot,
    top: f64,
    bottom: f64,
    gap: f64,
) -> f64 {
    let clear = |y: f64| {
        placed.iter().all(|(p, py)| {
            !p.span.overlaps(slot.span, 0.0) || (y - py).abs() >= (p.h + slot.h) / 2.0 + gap - 1e-9
        })
    };
    let (lo, hi) = (top + slot.h / 2.0, bottom - slot.h / 2.0);
    let want = slot.y.max(lo).min(hi.max(lo));
    let mut candidates = vec![want];
    for (p, py) in placed {
        let apart = (p.h + slot.h) / 2.0 + gap;
        candidates.extend([py - apart, py + apart]);
    }
    let best = |inside: bool| {
        candidates
            .iter()
            .copied()
            .filter(|y| !inside || (*y >= lo - 1e-9 && *y <= hi + 1e-9))
            .filter(|y| clear(*y))
            .min_by(|a, b| (a - slot.y).abs().total_cmp(&(b - slot.y).abs()))
    };
    best(true).or_else(|| best(false)).unwrap_or(want)
}

/// Which of `labels` (each `(centre x, width)`, in axis order) to show so that none overlap:
/// the first, then each one clear of the last shown, and always the last (dropping the one
/// before it if they would touch).
pub(crate) fn thin(labels: &[(f64, f64)], gap: f64) -> Vec<bool> {
    let mut keep = vec![false; labels.len()];
    let span = |(x, w): (f64, f64)| Span {
        x0: x - w / 2.0,
        x1: x + w / 2.0,
    };
    let mut last: Option<usize> = None;
    for (i, l) in labels.iter().enumerate() {
        if last.is_none_or(|j| !span(labels[j]).overlaps(span(*l), gap)) {
            keep[i] = true;
            last = Some(i);
        }
    }
    // The last label shows where the axis ends: it replaces the one before it if they touch
    // (unless that is the first).
    if let (Some(end), Some(j)) = (labels.len().checked_sub(1), last)
        && j != end
    {
        if !span(labels[j]).overlaps(span(labels[end]), gap) {
            keep[end] = true;
        } else if j > 0 {
            keep[j] = false;
            keep[end] = true;
        }
    }
    keep
}

/// Every how many evenly spaced category labels (`slot` apart, widest `widest`) to show one.
pub(crate) fn every(slot: f64, widest: f64, gap: f64) -> usize {
    if slot <= 0.0 {
        return 1;
    }
    ((widest + gap) / slot).ceil().max(1.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_two_labels_overlap(marks: &[(f64, f64)], placed: &[RowPlace]) {
        for (i, a) in placed.iter().enumerate() {
            assert!(
                (a.span.x1 - a.span.x0 - marks[i].1).abs() < 1e-9,
                "width kept"
            );
            for b in &placed[i + 1..] {
                assert!(
                    a.row != b.row || !a.span.overlaps(b.span, 0.0),
                    "{a:?} overlaps {b:?}"
                );
            }
        }
    }

    #[test]
    fn distant_marks_share_the_first_row_right_of_their_lines() {
        let marks = [(100.0, 50.0), (300.0, 50.0), (500.0, 50.0)];
        let p = mark_rows(&marks, 0.0, 700.0);
        assert!(p.iter().all(|p| p.row == 0), "{p:?}");
        assert_eq!(p[0].span.x0, 104.0);
        no_two_labels_overlap(&marks, &p);
    }

    #[test]
    fn equal_marks_stack_in_rows() {
        let marks = [(400.0, 80.0), (400.0, 120.0), (400.0, 60.0)];
        let p = mark_rows(&marks, 0.0, 700.0);
        no_two_labels_overlap(&marks, &p);
        assert!(
            p.iter().any(|p| p.row > 0),
            "three cannot share a row: {p:?}"
        );
        // Each label is beside the line (right of it or left of it).
        for p in &p {
            assert!(p.span.x0 == 404.0 || p.span.x1 == 396.0, "{p:?}");
        }
    }

    #[test]
    fn close_marks_go_left_or_up_and_no_line_crosses_a_label() {
        // The retry window at 3d and the TTL at 7d, 22 px apart, the TTL near the right edge.
        let marks = [(640.0, 110.0), (662.0, 170.0)];
        let p = mark_rows(&marks, 0.0, 700.0);
        no_two_labels_overlap(&marks, &p);
        for (i, a) in p.iter().enumerate() {
            for (j, b) in p.iter().enumerate() {
                if i != j && b.row >= a.row {
                    assert!(
                        !a.span.holds(marks[j].0, 0.0),
                        "line {j} crosses label {i}: {p:?}"
                    );
                }
            }
            assert!(a.span.x0 >= 0.0 && a.span.x1 <= 700.0, "inside: {a:?}");
        }
    }

    #[test]
    fn labels_too_wide_for_the_edge_are_kept_inside() {
        let p = mark_rows(&[(690.0, 200.0)], 0.0, 700.0);
        assert_eq!(
            p[0].span,
            Span {
                x0: 486.0,
                x1: 686.0
            },
            "left of the line"
        );
        let p = mark_rows(&[(10.0, 800.0)], 0.0, 700.0);
        assert_eq!(
            p[0].span.x0, 0.0,
            "wider than everything: from the left bound"
        );
    }

    #[test]
    fn many_crowded_marks_never_overlap() {
        let marks: Vec<(f64, f64)> = (0..12).map(|i| (300.0 + 3.0 * i as f64, 90.0)).collect();
        let p = mark_rows(&marks, 0.0, 700.0);
        no_two_labels_overlap(&marks, &p);
    }

    fn slot(x0: f64, y: f64) -> Slot {
        Slot {
            span: Span { x0, x1: x0 + 100.0 },
            y,
            h: 16.0,
        }
    }

    #[test]
    fn spread_separates_overlapping_labels_and_keeps_order() {
        let slots = [slot(600.0, 100.0), slot(600.0, 104.0), slot(600.0, 300.0)];
        let y = spread(&slots, 0.0, 400.0, 2.0);
        assert!(y[1] - y[0] >= 18.0 - 1e-9, "{y:?}");
        assert!(
            y[0] <= 100.0 && y[1] >= 104.0,
            "they move apart around their wants: {y:?}"
        );
        assert_eq!(y[2], 300.0, "a free label stays");
    }

    #[test]
    fn spread_stays_inside_and_moves_up_at_the_bottom() {
        let slots = [slot(600.0, 395.0), slot(600.0, 399.0)];
        let y = spread(&slots, 0.0, 400.0, 2.0);
        assert_eq!(y[1], 392.0);
        assert_eq!(y[0], 374.0);
        // Labels that do not overlap horizontally may share a height.
        let y = spread(&[slot(0.0, 50.0), slot(300.0, 50.0)], 0.0, 400.0, 2.0);
        assert_eq!(y, [50.0, 50.0]);
        // No room: no overlap, the bottom given up.
        let crowd: Vec<_> = (0..10).map(|_| slot(0.0, 20.0)).collect();
        let y = spread(&crowd, 0.0, 60.0, 2.0);
        let mut sorted = y.clone();
        sorted.sort_by(f64::total_cmp);
        for w in sorted.windows(2) {
            assert!(w[1] - w[0] >= 18.0 - 1e-9, "{y:?}");
        }
        assert!(sorted[0] >= 8.0);
    }

    #[test]
    fn nearest_free_goes_round_what_is_placed() {
        let placed = [(slot(600.0, 100.0), 100.0), (slot(600.0, 118.0), 118.0)];
        // Between two placed labels there is no room: below them is nearer than above.
        assert_eq!(
            nearest_free(&placed, slot(600.0, 112.0), 0.0, 400.0, 2.0),
            136.0
        );
        assert_eq!(
            nearest_free(&placed, slot(600.0, 104.0), 0.0, 400.0, 2.0),
            82.0
        );
        // Not overlapping horizontally: stays.
        assert_eq!(
            nearest_free(&placed, slot(0.0, 104.0), 0.0, 400.0, 2.0),
            104.0
        );
        // At the bottom bound: above.
        let low = [(slot(600.0, 392.0), 392.0)];
        assert_eq!(
            nearest_free(&low, slot(600.0, 399.0), 0.0, 400.0, 2.0),
            374.0
        );
    }

    #[test]
    fn thinning_keeps_the_ends_and_clears_the_rest() {
        let labels: Vec<(f64, f64)> = (0..20).map(|i| (i as f64 * 20.0, 30.0)).collect();
        let keep = thin(&labels, 4.0);
        assert!(keep[0] && keep[19]);
        let shown: Vec<_> = labels
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(l, _)| l.0)
            .collect();
        for w in shown.windows(2) {
            assert!(w[1] - w[0] >= 34.0, "{shown:?}");
        }
        assert_eq!(thin(&[], 4.0), Vec::<bool>::new());
        assert_eq!(every(10.0, 45.0, 5.0), 5);
        assert_eq!(every(100.0, 45.0, 5.0), 1);
    }
}
