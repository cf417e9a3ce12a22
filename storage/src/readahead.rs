//! Reading ahead of a sequential consumer. After a read from a segment file, the next stretch
//! of the file is read in the background, so that the disk works while the answer travels and
//! the consumer comes back for more (one consumer catching up from disk got about two thirds of
//! what six got together; the disk sat idle between its fetches).
//!
//! One stretch per log: the one after its last read from disk. A read that continues exactly
//! there takes it; any other read drops it. All stretches of a shard share one memory budget; a
//! read that finds it spent reads no further ahead.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;

use crate::budget::{Budget, Grant};
use crate::file::SegmentFile;
use crate::watermark::Watermark;

/// Where a stretch was read from: the read that may use it must continue exactly there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Continuation {
    pub segment_base: i64,
    /// The log's truncation count when it was read: a truncation makes it stale.
    pub generation: u64,
    /// The offset a sequential read asks for next, and the file position of its batch.
    pub offset: i64,
    pub position: u64,
}

/// A stretch being read, or read.
#[derive(Debug)]
pub struct ReadAhead {
    pub at: Continuation,
    data: Rc<RefCell<Option<Bytes>>>,
    done: Rc<Watermark>,
    _reservation: Grant,
}

impl ReadAhead {
    /// Starts reading `len` bytes of `file` at `at.position`, if the budget allows.
    pub fn start(
        file: Rc<SegmentFile>,
        at: Continuation,
        len: usize,
        budget: &Rc<Budget>,
    ) -> Option<ReadAhead> {
        let reservation = budget.try_take(len as u64)?;
        let data = Rc::new(RefCell::new(None));
        let done = Rc::new(Watermark::new(0));
        let (slot, finished) = (data.clone(), done.clone());
        glommio::spawn_local(async move {
            // A failed read ahead is no error: the read that wanted it reads for itself.
            if let Ok(bytes) = file.read_at(at.position, len).await {
                *slot.borrow_mut() = Some(Bytes::from(bytes));
            }
            finished.advance(1);
        })
        .detach();
        Some(ReadAhead {
            at,
            data,
            done,
            _reservation: reservation,
        })
    }

    /// The stretch, once read; `None` if the read failed.
    pub async fn take(self) -> Option<Bytes> {
        self.done.wait_for(1).await;
        self.data.borrow_mut().take()
    }
}
