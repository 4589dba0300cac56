//! The terminal: raw mode, the alternate screen and mouse capture, restored on every way
//! out, and the event loop.
//!
//! The ways out, and what restores the terminal on each:
//! - `q`, an error: [`restore`] at the end of [`run`] (and a drop guard);
//! - an uncaught panic on the explorer's thread: the panic hook, before the default hook
//!   prints, so the message lands on the normal screen;
//! - `std::process::exit` from anywhere: an `atexit` handler;
//! - SIGTERM, SIGINT, SIGHUP, SIGQUIT (raw mode turns off the keys that send them, but
//!   `kill` does not need keys) and SIGABRT (an allocation failure, a panic while
//!   panicking, a stack overflow): a signal handler that writes the escape sequences
//!   and restores the saved terminal attributes with async-signal-safe calls only, then
//!   lets the signal take its default action (the exit status still says which).

use std::io::{self, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use crossterm::cursor::Show;
use crossterm::event::{self, DisableMouseCapture, EnableMouseCapture, Event};
use crossterm::execute;
use crossterm::terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

use crate::app::App;
use crate::panics::caller_catches;
/// Runs a closure with panics reported by the caller (it lives in [`crate::panics`]).
pub use crate::panics::catching;

/// Whether the terminal is in the explorer's mode (so the hooks know to restore).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();
/// The thread that owns the terminal: a panic elsewhere (a worker whose caller catches
/// it) must not pull the screen from under a running explorer.
static UI_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// Restores the terminal before the default hook prints an uncaught panic, so the
/// message lands on a usable shell and not inside the alternate screen.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if caller_catches() {
                return;
            }
            if UI_THREAD.get().is_none_or(|&ui| ui == std::thread::current().id()) {
                restore();
            }
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
    // The attributes to go back to, saved before raw mode changes them.
    #[cfg(unix)]
    signals::save_terminal();
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    let mut out = io::stdout();
    execute!(out, EnterAlternateScreen, EnableMouseCapture)?;
    Terminal::new(CrosstermBackend::new(out))
}

/// The event loop: draw, wait for input or the next tick, handle every pending event.
pub fn run(app: &mut App) -> Result<(), String> {
    let _ = UI_THREAD.set(std::thread::current().id());
    install_panic_hook();
    #[cfg(unix)]
    signals::install();
    let _guard = Guard;
    let mut terminal = setup().map_err(|e| format!("cannot set up the terminal: {e}"))?;
    let io = |e: io::Error| format!("terminal: {e}");
    let fault = injected_fault();
    loop {
        terminal.draw(|f| crate::ui::draw(f, app)).map_err(io)?;
        if app.quit {
            break;
        }
        if event::poll(app.poll_interval()).map_err(io)? {
            loop {
                let ev = event::read().map_err(io)?;
                if let Some(fault) = fault {
                    fault.trigger_on(&ev);
                }
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
    let result = catching(|| tessera_passes::session::catch("handling an event", || f(app)));
    if let Err(e) = result {
        app.error(e.message);
    }
}

/// Test-only ways out, so that the end-to-end test can check that each one restores
/// the terminal: with `TESSERA_EXPLORE_FAULT` set (debug builds only), the key `!`
/// panics outside the explorer's own panic guard (`panic`), fails an allocation the way
/// a huge tile once did (`alloc`: "memory allocation of N bytes failed", then abort), or
/// calls `std::process::exit(3)` (`exit`).
#[derive(Copy, Clone, Debug)]
enum Fault {
    Panic,
    Alloc,
    Exit,
}

fn injected_fault() -> Option<Fault> {
    if !cfg!(debug_assertions) {
        return None;
    }
    match std::env::var("TESSERA_EXPLORE_FAULT").ok()?.as_str() {
        "panic" => Some(Fault::Panic),
        "alloc" => Some(Fault::Alloc),
        "exit" => Some(Fault::Exit),
        _ => None,
    }
}

impl Fault {
    fn trigger_on(self, ev: &Event) {
        let Event::Key(key) = ev else {
            return;
        };
        if key.code != event::KeyCode::Char('!') || key.kind != event::KeyEventKind::Press {
            return;
        }
        match self {
            Fault::Panic => panic!("injected panic (TESSERA_EXPLORE_FAULT=panic)"),
            Fault::Alloc => {
                std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(68_719_476_736, 8).unwrap())
            }
            Fault::Exit => std::process::exit(3),
        }
    }
}

/// Restoring the terminal where no Rust code may run: in signal handlers and at exit.
#[cfg(unix)]
mod signals {
    use std::sync::atomic::Ordering;
    use std::sync::{Once, OnceLock};

    use super::ACTIVE;

    /// The terminal's file descriptor and its attributes before raw mode.
    static SAVED: OnceLock<(libc::c_int, libc::termios)> = OnceLock::new();
    static INSTALLED: Once = Once::new();

    /// What crossterm's `DisableMouseCapture`, `LeaveAlternateScreen` and `Show` write.
    const RESET: &[u8] = b"\x1b[?1006l\x1b[?1015l\x1b[?1003l\x1b[?1002l\x1b[?1000l\x1b[?1049l\x1b[?25h";

    const SIGNALS: [libc::c_int; 5] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGABRT];

    /// Saves the terminal's attributes (the one raw mode changes: standard input, or
    /// /dev/tty when that is not a terminal).
    pub fn save_terminal() {
        if SAVED.get().is_some() {
            return;
        }
        // SAFETY: isatty, open and tcgetattr on a descriptor we own or stdin; `termios`
        // is plain data that tcgetattr fills before it is read.
        unsafe {
            let fd = if libc::isatty(libc::STDIN_FILENO) == 1 {
                libc::STDIN_FILENO
            } else {
                libc::open(c"/dev/tty".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC)
            };
            let mut termios: libc::termios = std::mem::zeroed();
            if fd >= 0 && libc::tcgetattr(fd, &mut termios) == 0 {
                let _ = SAVED.set((fd, termios));
            }
        }
    }

    /// Writes the reset sequences and puts the saved attributes back, once; uses only
    /// async-signal-safe calls (an atomic swap, write, tcsetattr).
    fn restore_raw() {
        if ACTIVE.swap(false, Ordering::SeqCst) {
            // SAFETY: write(2) of a static buffer and tcsetattr with saved attributes.
            unsafe {
                let _ = libc::write(libc::STDOUT_FILENO, RESET.as_ptr().cast(), RESET.len());
                if let Some((fd, termios)) = SAVED.get() {
                    libc::tcsetattr(*fd, libc::TCSANOW, termios);
                }
            }
        }
    }

    extern "C" fn on_signal(signal: libc::c_int) {
        let was_active = ACTIVE.load(Ordering::SeqCst);
        restore_raw();
        if was_active && signal == libc::SIGABRT {
            // Whatever was printed before the abort went to the alternate screen.
            let note = b"tessera-explore: aborted; the terminal was restored\n";
            // SAFETY: write(2) of a static buffer.
            unsafe {
                let _ = libc::write(libc::STDERR_FILENO, note.as_ptr().cast(), note.len());
            }
        }
        // SAFETY: back to the default action, then the same signal again: it is
        // delivered when this handler returns, so the exit status names the signal.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }

    extern "C" fn at_exit() {
        restore_raw();
    }

    /// Installs the handlers (once per process).
    pub fn install() {
        INSTALLED.call_once(|| {
            // SAFETY: sigaction with a handler that only makes async-signal-safe calls;
            // atexit with a function that does the same.
            unsafe {
                for signal in SIGNALS {
                    let mut action: libc::sigaction = std::mem::zeroed();
                    action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                    libc::sigemptyset(&mut action.sa_mask);
                    libc::sigaction(signal, &action, std::ptr::null_mut());
                }
                libc::atexit(at_exit);
            }
        });
    }
}
