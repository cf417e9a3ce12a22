//! What the fuzz targets share: a memory bound per input.
//!
//! Every target runs the code under test inside [`within_memory`], with a budget proportional to
//! its input. The global allocator counts every Rust allocation; one that would take the total
//! past the budget fails, and the process aborts with "memory allocation of N bytes failed",
//! which libFuzzer reports as a crash and saves the input. (libFuzzer's `-malloc_limit_mb` works
//! only through a sanitizer's allocator hooks, and these targets are built without a sanitizer:
//! see scripts/fuzz.)

use std::alloc::System;
use std::sync::Once;

use cap::Cap;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// Runs `f`, allowing it to hold at most `budget_bytes` more memory than was allocated before.
pub fn within_memory<T>(budget_bytes: usize, f: impl FnOnce() -> T) -> T {
    // A panic inside lifts the limit before it is reported: printing the message and the
    // backtrace allocates, and failing there turns a crash into a hang.
    static LIFT_ON_PANIC: Once = Once::new();
    LIFT_ON_PANIC.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = ALLOCATOR.set_limit(usize::MAX);
            report(info);
        }));
    });
    let before = ALLOCATOR.allocated();
    // Cannot fail: the limit is above what is allocated.
    let _ = ALLOCATOR.set_limit(before.saturating_add(budget_bytes));
    let out = f();
    let _ = ALLOCATOR.set_limit(usize::MAX);
    out
}

/// A budget of `per_input_byte` bytes for each input byte, on top of `fixed_bytes`.
pub fn budget(input_bytes: usize, per_input_byte: usize, fixed_bytes: usize) -> usize {
    input_bytes
        .saturating_mul(per_input_byte)
        .saturating_add(fixed_bytes)
}

/// Writes the CRC-32C that the v2 batch at the start of `buf` should have, where its length
/// allows; returns the batch's size. Targets use it so that mutations of what the CRC covers
/// reach the code after the CRC check (the log hands out only CRC-valid batches).
pub fn fix_crc(buf: &mut [u8]) -> Option<usize> {
    let length = buf.get(8..12)?;
    let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
    let size = usize::try_from(length).ok()?.checked_add(12)?;
    if buf.len() < 61 || !(21..=buf.len()).contains(&size) {
        return None;
    }
    let crc = crc32c::crc32c(&buf[21..size]);
    buf[17..21].copy_from_slice(&crc.to_be_bytes());
    Some(size)
}

#[path = "broker.rs"]
pub mod broker;
