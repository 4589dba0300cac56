//! The terminal: raw mode, the alternate screen and mouse capture, restored on every way
//! out (quit, error, panic), and the event loop.

use std::cell::Cell;
use std::io::{self, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::Duration;

use crossterm::cursor::Show;
use crossterm::event::{self, DisableMouseCapture, EnableMouseCapture};
use crossterm::execute;
use crossterm::terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

use crate::app::App;

thread_local! {
    /// Set while a caller catches panics itself (compiler queries, runs): the hook then
    /// leaves the terminal alone and the explorer shows the error.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the terminal is in the explorer's mode (so the panic hook knows to restore).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Runs `f` with panics reported by the caller rather than by the hook.
pub fn catching<T>(f: impl FnOnce() -> T) -> T {
    let before = CATCHING.with(|c| c.replace(true));
    let out = f();
    CATCHING.with(|c| c.set(before));
    out
}

/// Restores the terminal before the default hook prints an uncaught panic, so the
/// message lands on a usable shell and not inside the alternate screen.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                return;
            }
            restore();
            default(info);
        }));
    });
}

/// Leaves raw mode, the alternate screen and mouse capture (once; later calls do nothing).
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let mut out = io::stdout();
        let _ = execute!(out, DisableMouseCapture, LeaveAlternateScreen, Show);
        let _ = out.flush();
    }
}

struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

fn setup() -> io::Result<Terminal<CrosstermBackend<Stdout>>> {
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    let mut out = io::stdout();
    execute!(out, EnterAlternateScreen, EnableMouseCapture)?;
    Terminal::new(CrosstermBackend::new(out))
}

/// The event loop: draw, wait for input or the next tick, handle every pending event.
pub fn run(app: &mut App) -> Result<(), String> {
    install_panic_hook();
    let _guard = Guard;
    let mut terminal = setup().map_err(|e| format!("cannot set up the terminal: {e}"))?;
    let io = |e: io::Error| format!("terminal: {e}");
    loop {
        terminal.draw(|f| crate::ui::draw(f, app)).map_err(io)?;
        if app.quit {
            break;
        }
        if event::poll(app.poll_interval()).map_err(io)? {
            loop {
                let ev = event::read().map_err(io)?;
                guarded_step(app, |app| app.handle_event(ev));
                if app.quit || !event::poll(Duration::ZERO).map_err(io)? {
                    break;
                }
            }
        }
        guarded_step(app, App::tick);
    }
    drop(terminal);
    restore();
    Ok(())
}

/// A panic while handling an event is a bug, but not a reason to lose the session: the
/// message goes to the status bar and the explorer keeps running.
fn guarded_step(app: &mut App, f: impl FnOnce(&mut App)) {
    let result = catching(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(app))));
    if let Err(payload) = result {
        app.error(format!("internal error: {}", crate::runner::panic_text(&*payload)));
    }
}
