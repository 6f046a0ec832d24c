//! Time stamps along a call's path, to see where a null call's time goes: how long each
//! side's software takes between arriving data and the frame it sends back, and how long
//! the medium takes between them (`scripts/phases.py` prints the breakdown).
//!
//! Compiled only with the `phase-marks` feature; without it [`mark`] is an empty inline
//! function and nothing is recorded. With it, each thread keeps its marks (a [`Mark`] and a
//! reading of the time-stamp counter, about 10 ns per mark) in a buffer of
//! `$LANNER_PHASE_MARKS` marks (400,000 if unset). When the buffer is full it is written
//! to `$LANNER_PHASE_DIR/<pid>.<thread>` (if that variable is set) and the thread stops
//! marking. A run therefore records its first calls only, warm-up included: 400,000 marks
//! are about 60,000 null calls (`lanner bench pingpong --iters 200000` fills them; a run
//! with fewer calls, such as 64 KiB echoes, which the benchmark caps at 16,384, needs a
//! smaller buffer). Both processes of a
//! benchmark inherit the variable. Readings of the time-stamp counter compare across
//! the processes of one machine (its counter is synchronised across cores); each file's
//! first line gives the counter's ticks per nanosecond.

/// A point on a call's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mark {
    /// Client: a proxy method starts, before it encodes its request.
    ProxyMethod = 0,
    /// Client: the encoded request starts its call ([`crate::connection`]'s `call`).
    CallStart = 1,
    /// Either side: a frame's record was published in a shared-memory ring.
    Published = 2,
    /// Either side: a receive attempt took a whole frame from its transport.
    FrameTaken = 3,
    /// Either side: the protocol state decoded the frame (and looked up a request's
    /// object).
    FrameHandled = 4,
    /// Server: the stub ran and the call's context is made; the method's first poll is
    /// next.
    Dispatched = 5,
    /// Server: the method's first poll returned its reply.
    MethodReady = 6,
    /// Server: the answer is stamped and about to be written.
    AnswerStamped = 7,
    /// Client: the caller that spun for its reply has it.
    ReplyTaken = 8,
}

#[cfg(feature = "phase-marks")]
pub(crate) use recording::mark;

/// Records `mark` (see the module docs); does nothing without the `phase-marks` feature.
#[cfg(not(feature = "phase-marks"))]
#[inline(always)]
pub(crate) fn mark(_: Mark) {}

#[cfg(feature = "phase-marks")]
mod recording {
    use std::cell::RefCell;
    use std::io::Write;
    use std::time::Instant;

    use super::Mark;

    /// Marks each thread keeps before it writes them out and stops, unless
    /// `$LANNER_PHASE_MARKS` says otherwise.
    const CAPACITY: usize = 400_000;

    struct Marks {
        /// The first mark's clock and counter readings (for the counter's rate).
        start: Option<(Instant, u64)>,
        marks: Vec<(Mark, u64)>,
        /// How many marks are kept before they are written out.
        capacity: usize,
        /// Written out: no more marks.
        done: bool,
    }

    thread_local! {
        static MARKS: RefCell<Marks> = const {
            RefCell::new(Marks {
                start: None,
                marks: Vec::new(),
                capacity: 0,
                done: false,
            })
        };
    }

    /// The time-stamp counter.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn ticks() -> u64 {
        // SAFETY: `rdtsc` reads the time-stamp counter into registers; it has no
        // preconditions and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Nanoseconds since the process's first mark, where there is no time-stamp counter.
    #[cfg(not(target_arch = "x86_64"))]
    fn ticks() -> u64 {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }

    /// Records `mark` on this thread (see the module docs).
    #[inline(always)]
    pub(crate) fn mark(mark: Mark) {
        let now = ticks();
        MARKS.with(|marks| {
            let mut marks = marks.borrow_mut();
            if marks.done {
                return;
            }
            if marks.start.is_none() {
                marks.start = Some((Instant::now(), now));
                marks.capacity = std::env::var("LANNER_PHASE_MARKS")
                    .ok()
                    .and_then(|count| count.parse().ok())
                    .unwrap_or(CAPACITY)
                    .max(1);
                let capacity = marks.capacity;
                marks.marks.reserve_exact(capacity);
            }
            marks.marks.push((mark, now));
            if marks.marks.len() == marks.capacity {
                write_out(&marks);
                marks.done = true;
                marks.marks = Vec::new();
            }
        });
    }

    fn write_out(marks: &Marks) {
        let Some(dir) = std::env::var_os("LANNER_PHASE_DIR") else {
            return;
        };
        let Some((since, first)) = marks.start else {
            return;
        };
        let per_ns = ticks().saturating_sub(first) as f64 / since.elapsed().as_nanos() as f64;
        let thread = format!("{:?}", std::thread::current().id());
        let path = std::path::Path::new(&dir).join(format!("{}.{thread}", std::process::id()));
        let written = std::fs::File::create(&path).and_then(|file| {
            let mut out = std::io::BufWriter::new(file);
            writeln!(out, "# ticks_per_ns {per_ns}")?;
            for (mark, at) in &marks.marks {
                writeln!(out, "{} {at}", *mark as u8)?;
            }
            out.flush()
        });
        if let Err(error) = written {
            tracing::warn!(path = %path.display(), %error, "phase marks not written");
        }
    }
}
