//! Protocol constants and the negotiated limits of a connection.

/// The four bytes that open every handshake frame.
pub const MAGIC: [u8; 4] = *b"LNRP";

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 6;

/// The smallest maximum frame size a peer may announce. Anything smaller could not even
/// carry a request header with a few bulk segments.
pub const MIN_FRAME_SIZE: u32 = 4096;

/// The largest maximum frame size a peer may announce (1 GiB).
pub const MAX_FRAME_SIZE: u32 = 1 << 30;

/// Default maximum frame size (16 MiB): large enough that typical bulk payloads travel in
/// one frame (the seed papers' "large fragments"), small enough to bound memory per frame.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16 << 20;

/// Default number of requests a peer may have outstanding towards us.
pub const DEFAULT_CREDITS: u32 = 256;

/// The most requests this side keeps outstanding towards a peer, whatever the peer grants:
/// credits are what bounds the requests queued for a peer that does not read, so a peer
/// granting without end (in its HELLO or WELCOME, or in CREDIT frames and responses)
/// would leave that queue unbounded. Credits beyond it are not used.
pub const MAX_SEND_CREDITS: u32 = 1 << 16;

/// Maximum number of bulk segments in one message.
pub const MAX_BULK_SEGMENTS: u16 = 1024;

/// Maximum length of the human-readable reason in a close frame.
pub const MAX_REASON_LEN: usize = 1024;

/// What one side of a connection is willing to accept from the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame (header included) this side accepts.
    pub max_frame_size: u32,
    /// How many requests the peer may have outstanding towards this side: the initial
    /// credits granted at connect.
    pub credits: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            credits: DEFAULT_CREDITS,
        }
    }
}

impl Limits {
    /// Clamps the values into the ranges the protocol allows: the frame size into
    /// [`MIN_FRAME_SIZE`, `MAX_FRAME_SIZE`], credits to at least one.
    pub fn clamped(self) -> Limits {
        Limits {
            max_frame_size: self.max_frame_size.clamp(MIN_FRAME_SIZE, MAX_FRAME_SIZE),
            credits: self.credits.max(1),
        }
    }
}
