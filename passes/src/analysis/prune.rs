//! Pruning an autotune space without lowering every candidate.
//!
//! Whether a candidate fits a GPU is two questions about its [`Budget`]: is its shared
//! memory over the per-block limit, is its register estimate over the per-thread limit.
//! Both answers are monotone in the *tile keys* (`BM`, `BN`, `BK`, `stages`): among
//! candidates equal in every other key, a configuration at least as large in each tile
//! key has at least the shared memory and at least the registers of the smaller one (a
//! bigger tile, or one more stage of a ring, never removes a buffer or a live value).
//! `passes/tests/pruning.rs` checks that property on every kernel of the corpus, the
//! examples and the standard library over a grid of tile sizes, and that this search
//! prunes exactly the candidates that lowering each of them prunes.
//!
//! So one lowered candidate answers for many: over a limit, every larger candidate of
//! its class is over it too; under it, every smaller one is under. The search lowers
//! each class's largest candidate first, then walks the boundary between fitting and not
//! from the side the last lowering pointed to, until nothing is open, and names a
//! candidate it did not lower by the bound it inherits ([`Basis::AtLeast`]). A typical
//! space (32 GEMM candidates that all fit) needs two lowerings instead of 32.
//!
//! Before that walk, the analytic estimate ([`super::analytic`]) answers what it is sure
//! of: once one candidate is lowered, every other candidate's estimate is scaled by that
//! candidate's ratio of lowered figure to estimate, and a scaled estimate beyond a
//! margin of a limit ([`REGISTER_MARGINS`], [`SMEM_MARGINS`]) decides that question
//! ([`Basis::Analytic`]). Only the candidates near a limit are lowered: on flash
//! attention's 16 candidates, four instead of eleven. A lowering always outranks an
//! estimate, and the first pruned candidate of each kind, which W0702 names, is lowered
//! for its own figure.
//!
//! Tensor-core shape multiples are checked on every candidate (no lowering needed), and
//! a candidate that fails to lower says nothing about the others.

use std::borrow::Borrow;

use tessera_frontend::check::{KeyValue, ScheduleValue};

use super::limits::GpuLimits;
use super::{Budget, PruneReason};

/// The keys whose growth never shrinks a budget.
const TILE_KEYS: [&str; 4] = ["BM", "BN", "BK", "stages"];

/// What lowering one candidate told: its budget, or why it is out regardless of budgets.
pub enum Evaluated {
    Budget(Budget),
    Out(PruneReason),
}

/// One of the two budget questions, for one candidate: unknown, or known with the
/// budget figure that decided it and where that figure comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answer {
    Unknown,
    /// Over the limit.
    Over {
        figure: u64,
        basis: Basis,
    },
    /// Under it; `analytic`: by the estimate only.
    Under {
        analytic: bool,
    },
}

impl Answer {
    /// Decided by the analytic estimate alone: a lowering that says otherwise wins.
    fn analytic(self) -> bool {
        matches!(self, Answer::Over { basis: Basis::Analytic, .. } | Answer::Under { analytic: true })
    }
}

/// Where a figure behind a verdict comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Basis {
    /// The candidate was lowered: its own figure.
    Own,
    /// A smaller candidate's figure: a lower bound of its own.
    AtLeast,
    /// The analytic estimate ([`super::analytic`]), scaled by a lowered candidate's
    /// ratio of figure to estimate.
    Analytic,
}

/// How far from a limit a scaled estimate must be for pruning to take it without
/// lowering: over `.1` times the limit is over, under `.0` times it is under.
/// `passes/tests/pruning.rs` scales the estimate by every lowered candidate of a grid of
/// tile sizes, on every kernel of the corpus, the examples and the standard library, and
/// requires each verdict to match lowering. The shared-memory estimate is exact there;
/// the register estimate is not: at (0.85, 1.3) flash attention already disagrees (a
/// scaled estimate of 216 for a lowered 274), so the margins leave room beyond that.
pub const REGISTER_MARGINS: (f64, f64) = (0.7, 1.4);
pub const SMEM_MARGINS: (f64, f64) = (0.9, 1.1);

/// What a scaled estimate says about a limit: `Some(true)` over it, `Some(false)` under
/// it, `None` too close to tell (`margins` as [`REGISTER_MARGINS`]).
pub fn analytic_verdict(scaled: f64, limit: u64, (under, over): (f64, f64)) -> Option<bool> {
    if scaled > over * limit as f64 {
        Some(true)
    } else if scaled < under * limit as f64 {
        Some(false)
    } else {
        None
    }
}

/// A candidate's state during the search.
struct Candidate {
    /// Evaluated separately (tensor-core shape, lowering error): out of the order.
    out: Option<PruneReason>,
    smem: Answer,
    registers: Answer,
    lowered: bool,
}

impl Candidate {
    /// Still undecided: shared memory decides first (over it, the registers do not matter).
    fn open(&self) -> bool {
        self.out.is_none()
            && match self.smem {
                Answer::Unknown => true,
                Answer::Over { .. } => false,
                Answer::Under { .. } => self.registers == Answer::Unknown,
            }
    }

    /// Which budget prunes it (0 shared memory, 1 registers), if one does.
    fn pruned_by(&self) -> Option<usize> {
        match (self.out.is_some(), self.smem, self.registers) {
            (true, _, _) => None,
            (_, Answer::Over { .. }, _) => Some(0),
            (_, _, Answer::Over { .. }) => Some(1),
            _ => None,
        }
    }
}

/// A candidate's place in the order: its class (the values of every key but the tile
/// keys) and its tile key values.
struct Point {
    class: usize,
    tiles: [i64; TILE_KEYS.len()],
}

/// `a` ≤ `b`: the same class, and no larger in any tile key.
fn below(a: &Point, b: &Point) -> bool {
    a.class == b.class && a.tiles.iter().zip(&b.tiles).all(|(x, y)| x <= y)
}

fn points<S: Borrow<ScheduleValue>>(schedules: &[S]) -> Vec<Point> {
    let mut classes: Vec<Vec<(&String, &KeyValue)>> = Vec::new();
    schedules
        .iter()
        .map(|s| {
            let s = s.borrow();
            // A tile key without an integer value is compared for equality, as a class key.
            let key_of = |k: &str| s.values.get(k).and_then(KeyValue::as_int);
            let class_key: Vec<(&String, &KeyValue)> =
                s.values.iter().filter(|(k, v)| !TILE_KEYS.contains(&k.as_str()) || v.as_int().is_none()).collect();
            let class = match classes.iter().position(|c| *c == class_key) {
                Some(c) => c,
                None => {
                    classes.push(class_key);
                    classes.len() - 1
                }
            };
            Point { class, tiles: TILE_KEYS.map(|k| key_of(k).unwrap_or(0)) }
        })
        .collect()
}

/// The prune reason of every candidate of `schedules` (None: it fits). `precheck` is the
/// check that needs no lowering (tensor-core shapes); `evaluate` lowers one candidate;
/// `estimate` is the analytic estimate of one, where there is one. `seed` holds
/// candidates already lowered by the caller.
pub fn prune_space<S: Borrow<ScheduleValue>>(
    schedules: &[S],
    limits: &GpuLimits,
    precheck: impl Fn(usize) -> Option<PruneReason>,
    mut evaluate: impl FnMut(usize) -> Evaluated,
    estimate: impl Fn(usize) -> Option<Budget>,
    seed: Vec<(usize, Evaluated)>,
) -> Vec<Option<PruneReason>> {
    let n = schedules.len();
    let mut state: Vec<Candidate> = (0..n)
        .map(|i| Candidate { out: precheck(i), smem: Answer::Unknown, registers: Answer::Unknown, lowered: false })
        .collect();
    // The order, once: below_of[i] lists the candidates j < i, above_of[i] those j > i.
    let points = points(schedules);
    let below_of: Vec<Vec<usize>> =
        (0..n).map(|i| (0..n).filter(|&j| j != i && below(&points[j], &points[i])).collect()).collect();
    let above_of: Vec<Vec<usize>> =
        (0..n).map(|i| (0..n).filter(|&j| j != i && below(&points[i], &points[j])).collect()).collect();
    let smem_limit = limits.smem_per_block as u64;
    let reg_limit = limits.max_registers_per_thread as u64;
    let record = |state: &mut [Candidate], i: usize, result: Evaluated| {
        state[i].lowered = true;
        let budget = match result {
            Evaluated::Out(reason) => {
                state[i].out = Some(reason);
                return None;
            }
            Evaluated::Budget(b) => b,
        };
        let answers = [(budget.smem_bytes, smem_limit), (budget.register_peak as u64, reg_limit)];
        for (question, (figure, limit)) in answers.into_iter().enumerate() {
            let own = if figure > limit {
                Answer::Over { figure, basis: Basis::Own }
            } else {
                Answer::Under { analytic: false }
            };
            set(&mut state[i], question, own);
            // Over: every larger candidate is over, by at least this figure. Under: every
            // smaller one is under. Either outranks an estimate.
            let (others, inherited) = match own {
                Answer::Over { .. } => (&above_of[i], Answer::Over { figure, basis: Basis::AtLeast }),
                _ => (&below_of[i], Answer::Under { analytic: false }),
            };
            for &j in others {
                let current = get(&state[j], question);
                if state[j].out.is_none() && (current == Answer::Unknown || current.analytic()) {
                    set(&mut state[j], question, inherited);
                }
            }
        }
        Some(budget)
    };
    // After the first lowered budget: the estimate, scaled by that candidate's ratio of
    // figure to estimate, answers the questions it is sure of for every candidate not
    // decided yet.
    // And it predicts which side of the limits each candidate lies on, which steers the
    // order of the lowerings.
    let mut calibrated = false;
    let mut predicted_over: Vec<Option<bool>> = vec![None; n];
    let mut calibrate = |state: &mut [Candidate], predicted_over: &mut [Option<bool>], i: usize, budget: Budget| {
        if calibrated {
            return;
        }
        calibrated = true;
        let Some(at_seed) = estimate(i) else { return };
        let scales = [
            scale(budget.smem_bytes, at_seed.smem_bytes),
            scale(budget.register_peak as u64, at_seed.register_peak as u64),
        ];
        let questions = [(smem_limit, SMEM_MARGINS), (reg_limit, REGISTER_MARGINS)];
        for (j, candidate) in state.iter_mut().enumerate() {
            if candidate.out.is_some() || candidate.lowered {
                continue;
            }
            let Some(e) = estimate(j) else { continue };
            let figures = [e.smem_bytes, e.register_peak as u64];
            for (question, &(limit, margins)) in questions.iter().enumerate() {
                let Some(scale) = scales[question] else { continue };
                let scaled = figures[question] as f64 * scale;
                let over = scaled > limit as f64;
                predicted_over[j] = Some(predicted_over[j].unwrap_or(false) || over);
                if get(candidate, question) != Answer::Unknown {
                    continue;
                }
                match analytic_verdict(scaled, limit, margins) {
                    Some(true) => {
                        let figure = scaled.round() as u64;
                        set(candidate, question, Answer::Over { figure, basis: Basis::Analytic });
                    }
                    Some(false) => set(candidate, question, Answer::Under { analytic: true }),
                    None => {}
                }
            }
        }
    };
    // Whether the last candidate lowered in each class fitted: it steers the next choice.
    let classes = points.iter().map(|p| p.class + 1).max().unwrap_or(0);
    let mut last_fitted: Vec<Option<bool>> = vec![None; classes];
    let fitted = |c: &Candidate| c.out.is_none() && c.pruned_by().is_none();
    for (i, result) in seed {
        if let Some(budget) = record(&mut state, i, result) {
            calibrate(&mut state, &mut predicted_over, i, budget);
        }
        last_fitted[points[i].class] = Some(fitted(&state[i]));
    }
    // Lower open candidates until none is open:
    // - First each class's largest candidates: in most spaces they fit and answer for
    //   their whole class, and even one over the register budget usually answers the
    //   shared-memory question for its class (which decides first, so it must be known).
    // - Then, in the first class with open candidates, walk the boundary between fitting
    //   and not from the side the last lowering pointed to: after a fit, a largest open
    //   candidate (a fit answers for everything below it); after one over a budget, a
    //   smallest (over answers for everything above it). Without an estimate, flash
    //   attention's 16 candidates take 11 lowerings this way where bisection took 15.
    // - Where the estimate predicts a side, it chooses instead: a smallest open candidate
    //   among those predicted over a limit, a largest among those predicted under, so
    //   that each lowering answers for as many others as it can.
    while let Some(first) = (0..n).find(|&i| state[i].open()) {
        let open = |j: usize| state[j].open();
        let predicted = (0..n).find(|&i| {
            open(i)
                && match predicted_over[i] {
                    Some(true) => below_of[i].iter().all(|&j| !open(j)),
                    Some(false) => above_of[i].iter().all(|&j| !open(j)),
                    None => false,
                }
        });
        let largest = || (0..n).find(|&i| state[i].open() && above_of[i].is_empty());
        let next = predicted.or_else(largest).unwrap_or_else(|| {
            let class = points[first].class;
            let toward: &[Vec<usize>] = if last_fitted[class] == Some(false) { &below_of } else { &above_of };
            (0..n)
                .filter(|&i| points[i].class == class && state[i].open())
                .find(|&i| toward[i].iter().all(|&j| !state[j].open()))
                .unwrap_or(first)
        });
        let result = evaluate(next);
        if let Some(budget) = record(&mut state, next, result) {
            calibrate(&mut state, &mut predicted_over, next, budget);
        }
        last_fitted[points[next].class] = Some(fitted(&state[next]));
    }
    // The first pruned candidate of each kind is the one W0702 shows: give it its own
    // figure, not an inherited bound.
    let mut shown = [false; 2];
    for i in 0..n {
        let Some(kind) = state[i].pruned_by() else { continue };
        if shown[kind] {
            continue;
        }
        if !state[i].lowered {
            let result = evaluate(i);
            // Its own figures replace the inherited ones (and decide it, should they
            // ever disagree with the order).
            state[i].smem = Answer::Unknown;
            state[i].registers = Answer::Unknown;
            record(&mut state, i, result);
        }
        if let Some(kind) = state[i].pruned_by() {
            shown[kind] = true;
        }
    }
    state
        .into_iter()
        .map(|c| {
            if let Some(out) = c.out {
                return Some(out);
            }
            match (c.smem, c.registers) {
                (Answer::Over { figure, basis }, _) => {
                    Some(PruneReason::SharedMemory { bytes: figure, limit: smem_limit, basis })
                }
                (_, Answer::Over { figure, basis }) => {
                    Some(PruneReason::Registers { estimate: figure as u32, limit: reg_limit as u32, basis })
                }
                _ => None,
            }
        })
        .collect()
}

/// The ratio of a lowered figure to its estimate; none when the estimate is 0 and the
/// figure is not (the model misses something there).
pub fn scale(own: u64, estimated: u64) -> Option<f64> {
    match (own, estimated) {
        (0, 0) => Some(1.0),
        (_, 0) => None,
        (own, estimated) => Some(own as f64 / estimated as f64),
    }
}

fn get(c: &Candidate, question: usize) -> Answer {
    if question == 0 {
        c.smem
    } else {
        c.registers
    }
}

fn set(c: &mut Candidate, question: usize, a: Answer) {
    if question == 0 {
        c.smem = a;
    } else {
        c.registers = a;
    }
}
