//! Every key binding in one table: the event loop looks keys up here and the help
//! overlay and the hint bar are printed from it, so they cannot disagree.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Where a key is pressed: the focused pane, or an overlay.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Context {
    /// Anywhere outside an overlay (pane bindings win over these).
    Global,
    /// Moving in any list or text pane.
    Nav,
    Source,
    Ir,
    Passes,
    Schedule,
    Lints,
    Run,
    Picker,
    Edit,
    Help,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Action {
    Quit,
    Help,
    Close,
    Tab(u8),
    FocusNext,
    FocusPrev,
    StageNext,
    StagePrev,
    CycleTarget,
    PickKernel,
    ToggleLoc,
    ToggleDiff,
    Reload,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    Left,
    Right,
    Enter,
    NextMatch,
    PrevMatch,
    HideUnchanged,
    ValueNext,
    ValuePrev,
    Edit,
    ResetValue,
    ResetAll,
    Run,
    Autotune,
    Cancel,
    CycleDevice,
    ClearResults,
}

pub struct Binding {
    pub context: Context,
    /// As the help overlay shows it.
    pub keys: &'static str,
    pub codes: &'static [(KeyCode, KeyModifiers)],
    pub action: Action,
    pub help: &'static str,
}

const NONE: KeyModifiers = KeyModifiers::NONE;
const CTRL: KeyModifiers = KeyModifiers::CONTROL;

macro_rules! b {
    ($ctx:ident, $keys:expr, [$($code:expr),*], $action:expr, $help:expr) => {
        Binding { context: Context::$ctx, keys: $keys, codes: &[$($code),*], action: $action, help: $help }
    };
}

const fn c(ch: char) -> (KeyCode, KeyModifiers) {
    (KeyCode::Char(ch), NONE)
}

const fn k(code: KeyCode) -> (KeyCode, KeyModifiers) {
    (code, NONE)
}

const fn ctrl(ch: char) -> (KeyCode, KeyModifiers) {
    (KeyCode::Char(ch), CTRL)
}

pub const BINDINGS: &[Binding] = &[
    b!(Global, "q", [c('q'), ctrl('c')], Action::Quit, "quit (restores the terminal)"),
    b!(Global, "?", [c('?')], Action::Help, "this help"),
    b!(
        Global,
        "1-6",
        [c('1'), c('2'), c('3'), c('4'), c('5'), c('6')],
        Action::Tab(0),
        "explore · passes · lints · schedule · run · mesh"
    ),
    b!(Global, "Tab", [k(KeyCode::Tab)], Action::FocusNext, "focus the next pane"),
    b!(Global, "S-Tab", [k(KeyCode::BackTab)], Action::FocusPrev, "focus the previous pane"),
    b!(Global, "]", [c(']')], Action::StageNext, "next stage (graph → sched → tile → target)"),
    b!(Global, "[", [c('[')], Action::StagePrev, "previous stage"),
    b!(Global, "d", [c('d')], Action::ToggleDiff, "diff this stage against the previous one"),
    b!(Global, "p", [c('p')], Action::PickKernel, "pick a kernel or graph function"),
    b!(Global, "t", [c('t')], Action::CycleTarget, "target: sm_90 → sm_80 → cpu"),
    b!(Global, "L", [c('L')], Action::ToggleLoc, "show/hide loc(...) in IR"),
    b!(Global, "r", [c('r')], Action::Run, "run the kernel (current config) or graph function"),
    b!(Global, "a", [c('a')], Action::Autotune, "autotune: run every configuration of the space"),
    b!(Global, "x", [c('x')], Action::Cancel, "cancel the run after the current configuration"),
    b!(Global, "R", [c('R')], Action::Reload, "reload the file now (it also reloads on change)"),
    b!(Nav, "j/k ↓/↑", [c('j'), k(KeyCode::Down)], Action::Down, "move down / up"),
    b!(Nav, "", [c('k'), k(KeyCode::Up)], Action::Up, ""),
    b!(Nav, "C-d/C-u PgDn/PgUp", [ctrl('d'), k(KeyCode::PageDown)], Action::PageDown, "half a page down / up"),
    b!(Nav, "", [ctrl('u'), k(KeyCode::PageUp)], Action::PageUp, ""),
    b!(Nav, "g/G Home/End", [c('g'), k(KeyCode::Home)], Action::Top, "first / last line"),
    b!(Nav, "", [c('G'), k(KeyCode::End)], Action::Bottom, ""),
    b!(Source, "h/l ←/→", [c('h'), k(KeyCode::Left)], Action::Left, "scroll left / right"),
    b!(Source, "", [c('l'), k(KeyCode::Right)], Action::Right, ""),
    b!(Source, "Enter", [k(KeyCode::Enter)], Action::Enter, "go to the IR of this line"),
    b!(Source, "n/N", [c('n')], Action::NextMatch, "next / previous IR op of this line"),
    b!(Source, "", [c('N')], Action::PrevMatch, ""),
    b!(Ir, "h/l ←/→", [c('h'), k(KeyCode::Left)], Action::Left, "scroll left / right"),
    b!(Ir, "", [c('l'), k(KeyCode::Right)], Action::Right, ""),
    b!(Ir, "Enter", [k(KeyCode::Enter)], Action::Enter, "go to the source of this op"),
    b!(Ir, "n/N", [c('n')], Action::NextMatch, "next / previous change (diff) or op of the line"),
    b!(Ir, "", [c('N')], Action::PrevMatch, ""),
    b!(Passes, "H", [c('H')], Action::HideUnchanged, "hide passes that change nothing"),
    b!(Passes, "n/N", [c('n')], Action::NextMatch, "next / previous change"),
    b!(Passes, "", [c('N')], Action::PrevMatch, ""),
    b!(Passes, "h/l ←/→", [c('h'), k(KeyCode::Left)], Action::Left, "scroll the diff left / right"),
    b!(Passes, "", [c('l'), k(KeyCode::Right)], Action::Right, ""),
    b!(
        Schedule,
        "h/l ←/→ -/+",
        [c('h'), k(KeyCode::Left), c('-')],
        Action::ValuePrev,
        "previous / next value (space candidates first)"
    ),
    b!(Schedule, "", [c('l'), k(KeyCode::Right), c('+'), c('=')], Action::ValueNext, ""),
    b!(Schedule, "e Enter", [c('e'), k(KeyCode::Enter)], Action::Edit, "type a value"),
    b!(
        Schedule,
        "Bksp",
        [k(KeyCode::Backspace), k(KeyCode::Delete)],
        Action::ResetValue,
        "back to the kernel's own value"
    ),
    b!(Schedule, "C", [c('C')], Action::ResetAll, "clear every override"),
    b!(Lints, "Enter", [k(KeyCode::Enter)], Action::Enter, "jump to the source"),
    b!(Run, "b", [c('b')], Action::CycleDevice, "device: interpreter → cpu → gpu"),
    b!(Run, "Enter", [k(KeyCode::Enter)], Action::Enter, "use this result's configuration"),
    b!(Run, "D", [c('D')], Action::ClearResults, "forget the results"),
    b!(Picker, "↑/↓ C-p/C-n", [k(KeyCode::Up), ctrl('p')], Action::Up, "move (type to filter)"),
    b!(Picker, "", [k(KeyCode::Down), ctrl('n')], Action::Down, ""),
    b!(Picker, "Enter", [k(KeyCode::Enter)], Action::Enter, "open"),
    b!(Picker, "Esc", [k(KeyCode::Esc)], Action::Close, "cancel"),
    b!(Edit, "Enter", [k(KeyCode::Enter)], Action::Enter, "apply"),
    b!(Edit, "Esc", [k(KeyCode::Esc)], Action::Close, "cancel"),
    b!(Help, "Esc q ?", [k(KeyCode::Esc), c('q'), c('?')], Action::Close, "close"),
    b!(Help, "j/k", [c('j'), k(KeyCode::Down)], Action::Down, "scroll"),
    b!(Help, "", [c('k'), k(KeyCode::Up)], Action::Up, ""),
];

fn matches(codes: &[(KeyCode, KeyModifiers)], key: &KeyEvent) -> Option<usize> {
    // Terminals report `G` as Shift+g or as plain `G`: compare characters without Shift.
    // BackTab arrives with Shift set by some terminals and without it by others.
    let mods = if matches!(key.code, KeyCode::Char(_) | KeyCode::BackTab) {
        key.modifiers - KeyModifiers::SHIFT
    } else {
        key.modifiers
    };
    codes.iter().position(|(code, m)| *code == key.code && *m == mods)
}

/// The action of `key` in a context, trying the pane's own table first, then moving,
/// then the global one (overlays have only their own).
pub fn lookup(contexts: &[Context], key: &KeyEvent) -> Option<Action> {
    for ctx in contexts {
        for b in BINDINGS.iter().filter(|b| b.context == *ctx) {
            if let Some(i) = matches(b.codes, key) {
                return Some(match b.action {
                    Action::Tab(_) => Action::Tab(i as u8),
                    a => a,
                });
            }
        }
    }
    None
}

/// The contexts whose bindings apply, most specific first.
pub fn chain(pane: Context) -> Vec<Context> {
    match pane {
        Context::Picker | Context::Edit | Context::Help => vec![pane],
        Context::Global => vec![Context::Global],
        _ => vec![pane, Context::Nav, Context::Global],
    }
}

/// Bindings of a context for the help overlay (continuation rows have empty keys).
pub fn help_rows(context: Context) -> impl Iterator<Item = &'static Binding> {
    BINDINGS.iter().filter(move |b| b.context == context && !b.keys.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, m)
    }

    #[test]
    fn pane_bindings_win_and_shift_is_ignored_on_characters() {
        let ir = chain(Context::Ir);
        assert_eq!(lookup(&ir, &key(KeyCode::Char('l'), NONE)), Some(Action::Right));
        assert_eq!(lookup(&chain(Context::Schedule), &key(KeyCode::Char('l'), NONE)), Some(Action::ValueNext));
        assert_eq!(lookup(&ir, &key(KeyCode::Char('G'), KeyModifiers::SHIFT)), Some(Action::Bottom));
        assert_eq!(lookup(&ir, &key(KeyCode::Char('3'), NONE)), Some(Action::Tab(2)));
        assert_eq!(lookup(&ir, &key(KeyCode::Char('c'), CTRL)), Some(Action::Quit));
        // Overlays see only their own keys: `q` types into the picker's filter.
        assert_eq!(lookup(&chain(Context::Picker), &key(KeyCode::Char('q'), NONE)), None);
        assert_eq!(lookup(&chain(Context::Help), &key(KeyCode::Char('q'), NONE)), Some(Action::Close));
    }

    #[test]
    fn no_key_is_bound_twice_in_one_chain() {
        for pane in [Context::Source, Context::Ir, Context::Passes, Context::Schedule, Context::Lints, Context::Run] {
            let chain = chain(pane);
            let mut seen: Vec<(KeyCode, KeyModifiers, Context)> = Vec::new();
            for ctx in &chain {
                for b in BINDINGS.iter().filter(|b| b.context == *ctx) {
                    for (code, m) in b.codes {
                        assert!(
                            !seen.iter().any(|(c2, m2, ctx2)| c2 == code && m2 == m && ctx2 == ctx),
                            "{code:?} bound twice in {ctx:?}"
                        );
                        seen.push((*code, *m, *ctx));
                    }
                }
            }
        }
    }
}
