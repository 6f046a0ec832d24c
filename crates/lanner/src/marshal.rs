//! Encoding arguments and results.
//!
//! Small values are encoded once with postcard into the message's inline part. A parameter
//! or result declared as `Bytes` is a bulk payload: it travels as its own segment, written
//! from the caller's buffer and received as a slice of the receive buffer, never copied.
//! Only a parameter or result spelled `Bytes` is bulk: `Bytes` nested inside another type
//! (`Vec<Bytes>`, a struct field) would be encoded inline, which needs the `bytes` crate's
//! `serde` feature; Lanner does not enable it, so use `Vec<u8>` there.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::Either;
use lanner_proto::{MessageBuilder, Payload, PlainRequest, Response, Status};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::call::{IncomingCall, Reply, ReplyMessage};
use crate::connection::{Connection, Discard, Outgoing};
use crate::context::CallContext;
use crate::depth::{self, Limited, MAX_DEPTH};
use crate::error::{Error, ErrorKind};
use crate::id::MethodInfo;
use crate::object::DispatchFuture;
use crate::objref;
use crate::phase_marks::{self, Mark};
use crate::proxy::ProxyCore;
use crate::reference::Target;

/// How a method's success value travels: inline ([`Inline`]) or as a bulk segment
/// ([`Bulk`]). The generated code picks one per method.
pub trait ValueCodec: Send + 'static {
    /// The value type.
    type Value: Send;

    /// Whether an encoded value may carry object references (see [`crate::ObjRef`]):
    /// a reply whose value cannot is encoded without tracking what it exports or hands
    /// back. True unless the codec says otherwise.
    const MAY_CARRY_REFERENCES: bool = true;

    /// Appends `value` to a message.
    fn encode(value: Self::Value, message: &mut MessageBuilder) -> Result<(), Error>;

    /// Reads the value from a received payload.
    fn decode(payload: &Payload) -> Result<Self::Value, Error>;

    /// The value as a plain reply's bulk segment (`Ok(None)`: a value that encodes to
    /// nothing at all), if [`ValueCodec::encode`] would append only that segment; else
    /// the value back (the default). A plain reply is stamped without a builder (see
    /// `lanner_proto::plain`).
    fn into_plain(value: Self::Value) -> Result<Option<Bytes>, Self::Value> {
        Err(value)
    }
}

/// A value encoded inline with postcard.
pub struct Inline<T>(PhantomData<fn() -> T>);

impl<T: Serialize + DeserializeOwned + Send + 'static> ValueCodec for Inline<T> {
    type Value = T;

    fn encode(value: T, message: &mut MessageBuilder) -> Result<(), Error> {
        encode_inline(&value, message)
    }

    fn decode(payload: &Payload) -> Result<T, Error> {
        decode_inline(payload.inline_slice())
    }
}

/// A `Bytes` value sent as a bulk segment.
pub struct Bulk;

impl ValueCodec for Bulk {
    type Value = Bytes;

    // Bytes only, never a reference.
    const MAY_CARRY_REFERENCES: bool = false;

    fn encode(value: Bytes, message: &mut MessageBuilder) -> Result<(), Error> {
        message.push_segment(value);
        Ok(())
    }

    fn into_plain(value: Bytes) -> Result<Option<Bytes>, Bytes> {
        Ok(Some(value))
    }

    fn decode(payload: &Payload) -> Result<Bytes, Error> {
        payload.segment(0).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                "the reply carries no bulk segment for its Bytes result",
            )
        })
    }
}

/// `()`, the value of methods that return nothing: encoded as [`Inline<()>`] is (no
/// bytes, none allowed when decoding), without tracking object references, which it
/// cannot carry.
pub struct Unit;

impl ValueCodec for Unit {
    type Value = ();

    const MAY_CARRY_REFERENCES: bool = false;

    fn encode((): (), _message: &mut MessageBuilder) -> Result<(), Error> {
        Ok(())
    }

    fn into_plain((): ()) -> Result<Option<Bytes>, ()> {
        Ok(None)
    }

    fn decode(payload: &Payload) -> Result<(), Error> {
        decode_inline(payload.inline_slice())
    }
}

fn encode_inline<T: Serialize + ?Sized>(
    value: &T,
    message: &mut MessageBuilder,
) -> Result<(), Error> {
    objref::take_failure();
    postcard::to_io(value, message.inline())
        .map(drop)
        .map_err(|e| {
            let (kind, why) = objref::take_failure()
                .unwrap_or_else(|| (ErrorKind::InvalidArgument, e.to_string()));
            Error::new(kind, format!("could not encode: {why}"))
        })
}

/// Decodes `bytes` as exactly one `T` (trailing bytes are an error: they mean the peers
/// disagree about the type), nested at most [`MAX_DEPTH`] levels deep.
pub(crate) fn decode_inline<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    // A flag left by a decode whose error a visitor swallowed must not mislabel this one.
    depth::took_too_deep();
    objref::take_failure();
    let mut deserializer = postcard::Deserializer::from_bytes(bytes);
    let decoded = T::deserialize(Limited::new(&mut deserializer, MAX_DEPTH))
        .and_then(|value| Ok((value, deserializer.finalize()?)));
    match decoded {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(Error::new(
            ErrorKind::InvalidArgument,
            unexpected_bytes(rest.len()),
        )),
        Err(e) => {
            let why = if depth::took_too_deep() {
                depth::too_deep_message()
            } else {
                objref::take_failure().map_or_else(|| e.to_string(), |(_, why)| why)
            };
            Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("could not decode: {why}"),
            ))
        }
    }
}

/// Why a value followed by `count` more bytes is refused.
fn unexpected_bytes(count: usize) -> String {
    format!("{count} unexpected bytes after the value: the peers disagree about its type")
}

/// A request built by [`request`], not sent yet.
pub struct OutgoingRequest {
    /// Built, or (no inline arguments, at most one bulk one) kept as its fields, to be
    /// stamped and written without a builder where it can be (see
    /// `lanner_proto::plain`).
    message: Outgoing,
    /// References to the peer's objects handed back in the arguments (held until the
    /// call ends, so that their release cannot reach the peer before the request does),
    /// and this side's objects the arguments exported (unexported if the request is
    /// dropped unsent).
    encoded: objref::Encoded,
}

/// Where a call through a proxy goes: the proxy's interface on the object at `target`,
/// and the call's deadline. Settled by [`destination`] before the request is built.
pub struct Destination<'a> {
    core: &'a ProxyCore,
    /// Borrowed from the proxy in the common case: no reference count taken per call.
    target: Cow<'a, Target>,
    deadline: Option<Instant>,
    /// What the request tells the callee it has left (see [`destination`]).
    timeout: Option<Duration>,
}

/// Settles where a call through `core` goes: the reference's current connection, or a new
/// one if it had to reconnect (a URL reference whose connection broke) or to claim the
/// object first (a reference handed over by a third party). The call's timeout starts
/// now; made from inside a served call, it ends no later than that call's deadline (see
/// `call_timeout`). (Reconnecting and claiming are boxed by the reference: they add
/// nothing to the size of a call's future.)
pub async fn destination(core: &ProxyCore) -> Result<Destination<'_>, Error> {
    phase_marks::mark(Mark::ProxyMethod);
    if let Some(target) = core.pinned_target() {
        let (timeout, deadline) = call_timeout(core.timeout_on(&target.connection))?;
        return Ok(Destination {
            core,
            target: Cow::Borrowed(target),
            deadline,
            timeout,
        });
    }
    let current = core.object().current_target();
    let (mut timeout, deadline) = call_timeout(core.timeout_on(&current.connection))?;
    // The address only (a raw pointer would make the future `!Send`).
    let before = Arc::as_ptr(&current.connection) as usize;
    let target = core.object().usable_target(current, deadline).await?;
    if let Some(deadline) = deadline.filter(|_| before != Arc::as_ptr(&target.connection) as usize)
    {
        // Reconnecting or claiming took some of the time: the callee gets what is left.
        timeout = Some(deadline.saturating_duration_since(Instant::now()));
    }
    Ok(Destination {
        core,
        target: Cow::Owned(target),
        deadline,
        timeout,
    })
}

/// A call's timeout and deadline, starting now: its own `timeout`, shortened to what is
/// left of the deadline of the call being served on this thread, if any. A method that
/// calls on (a callback into its caller, another server) passes its caller's deadline
/// along, as gRPC's deadline propagation does: nobody waits for the nested call past the
/// moment its caller's caller stops waiting, and a callback cannot hold an apartment
/// longer than that. Fails, without sending, once that deadline has passed.
fn call_timeout(timeout: Option<Duration>) -> Result<(Option<Duration>, Option<Instant>), Error> {
    let Some(inherited) = CallContext::current_deadline() else {
        return Ok((timeout, timeout.and_then(deadline_after)));
    };
    let now = Instant::now();
    let left = inherited.saturating_duration_since(now);
    if left.is_zero() {
        return Err(Error::new(
            ErrorKind::DeadlineExceeded,
            "the deadline of the call being served, which this call inherits, has passed: not sent",
        ));
    }
    match timeout {
        Some(own) if own < left => Ok((Some(own), deadline_after(own))),
        _ => Ok((Some(left), Some(inherited))),
    }
}

/// Builds a request for `method` with `args` (the inline arguments, as a tuple) and the
/// bulk arguments `segments`, to send to `to`.
pub fn request<A: Serialize>(
    to: &Destination<'_>,
    method: &MethodInfo,
    args: &A,
    segments: impl IntoIterator<Item = Bytes>,
) -> Result<OutgoingRequest, Error> {
    let mut message = start_request(to, method);
    // Object references among the arguments are handed to the connection the call goes on.
    // (On failure `encoded` is dropped, which undoes what they exported.)
    let (result, encoded) =
        objref::encoding(&to.target.connection, || encode_inline(args, &mut message));
    result.map_err(|e| {
        Error::new(
            e.kind(),
            format!("arguments of {}: {}", method.name, e.message()),
        )
    })?;
    message.end_with_references(encoded.unsent.handles());
    Ok(with_segments(message, segments, encoded))
}

/// [`request`] for a method without inline arguments (bulk ones only, or none at all):
/// there is nothing to encode, and no object reference to hand over.
pub fn request_without_inline(
    to: &Destination<'_>,
    method: &MethodInfo,
    segments: impl IntoIterator<Item = Bytes>,
) -> Result<OutgoingRequest, Error> {
    let mut segments = segments.into_iter();
    let first = segments.next();
    let Some(second) = segments.next() else {
        return Ok(OutgoingRequest {
            message: Outgoing::Plain(plain_request(to, method, first)),
            encoded: objref::Encoded::default(),
        });
    };
    Ok(with_segments(
        start_request(to, method),
        first.into_iter().chain([second]).chain(segments),
        objref::Encoded::default(),
    ))
}

/// A request's last part: its bulk segments, sent from their own buffers.
fn with_segments(
    mut message: MessageBuilder,
    segments: impl IntoIterator<Item = Bytes>,
    encoded: objref::Encoded,
) -> OutgoingRequest {
    for segment in segments {
        message.push_segment(segment);
    }
    OutgoingRequest {
        message: Outgoing::Built(message),
        encoded,
    }
}

/// A request's header: the destination's object and interface, the method, the timeout.
fn start_request(to: &Destination<'_>, method: &MethodInfo) -> MessageBuilder {
    plain_request(to, method, None).into_builder()
}

/// The request for `method` at `to` with no inline arguments and `bulk`, if any, as its
/// fields.
fn plain_request(to: &Destination<'_>, method: &MethodInfo, bulk: Option<Bytes>) -> PlainRequest {
    PlainRequest {
        object: to.target.handle,
        slot: to.core.slot(),
        method: method.ordinal,
        fingerprint: method.fingerprint,
        timeout: to.timeout,
        one_way: false,
        bulk,
    }
}

/// Sends a request built by [`request`] and decodes the reply: `C` for the success
/// value, `E` for the application error; transport and protocol failures become `E`
/// through `From<lanner::Error>`.
///
/// The request is sent when this is called (it runs inside the proxy method's future, at
/// its first poll), so the returned future holds only the call in flight: it stays small
/// however large the request was. It borrows `to`, which the proxy method's future keeps
/// until the call ends: the call uses the destination's connection without a reference
/// count of its own (an atomic increment and decrement per call on the calling side).
pub fn invoke<C, E>(
    to: &Destination<'_>,
    method: &'static MethodInfo,
    request: Result<OutgoingRequest, Error>,
) -> impl Future<Output = Result<C::Value, E>> + Send
where
    C: ValueCodec,
    E: DeserializeOwned + From<Error>,
{
    let started = request.and_then(|request| {
        // Made while serving a call: given up with it (see `crate::context`), and not
        // sent at all once it is.
        let cancellation = CallContext::current_cancellation();
        if cancellation
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Err(given_up());
        }
        let OutgoingRequest { message, encoded } = request;
        // The call in flight borrows its connection from the destination, which the
        // proxy method's future holds across the call: no reference count per call.
        let mut pending = to.target.connection.call(message, to.deadline);
        pending.discard_with(Discard {
            run: discard_reply::<C, E>,
            method,
        });
        pending.unless_sent(encoded.unsent);
        Ok((pending, encoded.handed_back, cancellation))
    });
    async move {
        // The references handed back stay held until the call ends.
        let (mut pending, _handed_back, cancellation) = started?;
        let response = match cancellation {
            None => (&mut pending).await?,
            Some(cancellation) => unless_cancelled(&mut pending, cancellation).await?,
        };
        decode_response::<C, E>(pending.connection(), method, &response)
    }
}

/// Waits for `answer` unless `cancellation` (the served call's, which this call was made
/// for) fires first: then fails with `Cancelled`, and the caller drops the call, which
/// sends its callee a CANCEL. Boxed: only calls made while serving a call pay for it,
/// not the size of every call's future.
fn unless_cancelled<'a, T: Send>(
    answer: &'a mut (impl Future<Output = Result<T, Error>> + Unpin + Send),
    cancellation: CancellationToken,
) -> Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>> {
    Box::pin(async move {
        tokio::select! {
            biased;
            answer = answer => answer,
            () = cancellation.cancelled() => Err(given_up().after_sending()),
        }
    })
}

/// The error of a call given up because the call it was made for was cancelled.
fn given_up() -> Error {
    Error::new(
        ErrorKind::Cancelled,
        "given up: the call it was made for was cancelled (its caller gave up, or its connection ended)",
    )
}

/// Disposes of the reply to a call its caller gave up on: decodes it and drops what it
/// decoded, so that the references to the peer's objects in it are released (see
/// [`Discard`]).
fn discard_reply<C, E>(
    connection: &Arc<Connection>,
    method: &'static MethodInfo,
    response: &Response,
) where
    C: ValueCodec,
    E: DeserializeOwned + From<Error>,
{
    drop(decode_response::<C, E>(connection, method, response));
}

/// Puts the timeout of a call made now (its own `timeout`, or less, see [`call_timeout`])
/// in the request and returns the call's deadline.
pub(crate) fn set_deadline(
    request: &mut MessageBuilder,
    timeout: Option<Duration>,
) -> Result<Option<Instant>, Error> {
    let (timeout, deadline) = call_timeout(timeout)?;
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    Ok(deadline)
}

/// When a wait of `timeout` starting now ends (a call's, a handshake's, a shutdown's
/// grace); `None` (no deadline) for a timeout too long to be a date (`Duration::MAX`,
/// say, for "forever").
pub(crate) fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// Sends a one-way request built by [`request`]: `Ok` once it is written (the method's
/// outcome never comes back); an error if it could not be sent.
///
/// With a credit at hand the request is written (or queued for the reader's next batch)
/// before this returns, and the future is ready at once, the size of its result. Only a
/// call that must wait for a credit builds a waiting future, boxed: its hundreds of bytes
/// are then no part of every call's future, which is moved at every `.await` it crosses.
pub fn invoke_one_way<E>(
    to: Destination<'_>,
    request: Result<OutgoingRequest, Error>,
) -> impl Future<Output = Result<(), E>> + Send + use<E>
where
    E: From<Error> + Send,
{
    let attempt = request.and_then(|request| {
        let OutgoingRequest {
            mut message,
            encoded,
        } = request;
        message.set_one_way();
        match to.target.connection.try_send_one_way(message)? {
            Ok(()) => {
                encoded.unsent.sent();
                Ok(None)
            }
            Err(message) => Ok(Some((message, encoded))),
        }
    });
    let (message, encoded) = match attempt {
        Ok(None) => return Either::Left(std::future::ready(Ok(()))),
        Err(error) => return Either::Left(std::future::ready(Err(E::from(error)))),
        Ok(Some(waiting)) => waiting,
    };
    let connection = to.target.into_owned().connection;
    let deadline = to.deadline;
    Either::Right(Box::pin(async move {
        let sent = connection.wait_to_send_one_way(message, deadline).await;
        if sent.is_ok() {
            encoded.unsent.sent();
        }
        sent.map_err(E::from)
    }))
}

/// Decodes the answer to a call received on `connection`: a value that fails to decode
/// gives up the references it decoded and releases what the reply's reference table
/// lists (see [`objref::decoding_result`]).
fn decode_response<C, E>(
    connection: &Arc<Connection>,
    method: &MethodInfo,
    response: &Response,
) -> Result<C::Value, E>
where
    C: ValueCodec,
    E: DeserializeOwned + From<Error>,
{
    // The method ran: an answer that cannot be decoded still means it executed.
    let context = |e: Error| {
        Error::new(
            e.kind(),
            format!("result of {}: {}", method.name, e.message()),
        )
        .after_sending()
    };
    let payload = &response.payload;
    match response.status {
        Status::Ok => objref::decoding_result(connection, payload, || C::decode(payload))
            .map_err(|e| E::from(context(e))),
        Status::AppError => {
            match objref::decoding_result(connection, payload, || {
                decode_inline::<E>(payload.inline_slice())
            }) {
                Ok(app_error) => Err(app_error),
                Err(e) => Err(E::from(context(e))),
            }
        }
        status => Err(E::from(error_from_payload(status, &response.payload))),
    }
}

/// The error a non-OK, non-application status carries (its message is the inline UTF-8).
pub(crate) fn error_from_payload(status: Status, payload: &Payload) -> Error {
    let message = String::from_utf8_lossy(payload.inline_slice()).into_owned();
    Error::from_reply_status(status, message)
}

/// Decodes a call's inline arguments as `A` (a tuple of the method's non-bulk parameters),
/// unless the call is refused (see `IncomingCall::refusal`; `interface` names the
/// method's interface in the refusal): then the refusal is the answer, after the
/// arguments were decoded and dropped, which releases the object references among them.
/// The error is the answer, as the future the stub returns (see `decode_arguments`).
pub fn arguments<A: DeserializeOwned>(
    call: &IncomingCall<'_>,
    method: &MethodInfo,
    interface: &str,
) -> Result<A, DispatchFuture> {
    unless_refused(decode_arguments(call, method), call, method, interface)
}

/// Decodes a call's inline arguments as `A`. Arguments that fail to decode are answered as
/// unread: every object reference among them is released (all or nothing, even for a
/// one-way call; see `Reply::arguments_unread`).
pub(crate) fn decode_arguments<A: DeserializeOwned>(
    call: &IncomingCall<'_>,
    method: &MethodInfo,
) -> Result<A, Reply> {
    // The references among them are this decoder's from now on (see `IncomingCall`).
    call.arguments_read.store(true, Ordering::Relaxed);
    // Invalid arguments, or (a panic) a `Deserialize` that failed on them.
    let payload = &call.request.payload;
    objref::decoding_arguments(call.connection, payload, || decode_inline(call.inline())).map_err(
        |e| {
            Reply::error(&Error::new(
                e.kind(),
                format!("arguments of {}: {}", method.name, e.message()),
            ))
            .arguments_unread()
        },
    )
}

/// [`arguments`] for a method without inline arguments: the request must carry none
/// (bytes there mean the caller's method takes arguments this one does not). One function
/// for every such method of every stub, not code in each (see [`answered`]).
#[inline(never)]
pub fn no_arguments(
    call: &IncomingCall<'_>,
    method: &MethodInfo,
    interface: &str,
) -> Result<(), DispatchFuture> {
    let decoded = match call.inline().len() {
        0 => Ok(()),
        extra => Err(Reply::error(&Error::new(
            ErrorKind::InvalidArgument,
            format!("arguments of {}: {}", method.name, unexpected_bytes(extra)),
        ))
        .arguments_unread()),
    };
    unless_refused(decoded, call, method, interface)
}

/// The decoded arguments, unless the call is refused (the refusal told as unread if they
/// did not decode: those references were given up) or they did not decode.
#[inline]
fn unless_refused<A>(
    decoded: Result<A, Reply>,
    call: &IncomingCall<'_>,
    method: &MethodInfo,
    interface: &str,
) -> Result<A, DispatchFuture> {
    match call.refusal(interface, method) {
        None => decoded.map_err(answered),
        // Dropping what was decoded releases the references among it.
        Some(refusal) => Err(refused(refusal, decoded.is_ok())),
    }
}

/// The answer of a refused call, told as unread if its arguments did not decode. Out of
/// line: a stub's path for a call that runs moves no reply around.
#[cold]
#[inline(never)]
fn refused(refusal: Reply, decoded: bool) -> DispatchFuture {
    match decoded {
        true => answered(refusal),
        false => answered(refusal.arguments_unread()),
    }
}

/// A call answered without running its method (refused, or its arguments did not
/// decode), as the future a stub returns. One function for every stub and method, not an
/// `async` block in each: the code of each method's path through a stub is then short, so
/// a call on one of many methods touches few lines of code (see docs/decisions.md,
/// "Scale").
#[inline(never)]
pub fn answered(reply: Reply) -> DispatchFuture {
    ANSWERED.set(true);
    Box::pin(std::future::ready(reply))
}

thread_local! {
    /// Set by [`answered`]: the future a stub returned answers without running a method.
    static ANSWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether [`answered`] ran on this thread since the last look; clears the mark. Looked
/// at around a stub's dispatch: a call to an apartment object that the stub refused
/// (unknown method, access denied, arguments that do not decode) runs nothing of the
/// object, so it need not wait for the apartment's turn.
pub(crate) fn take_answered() -> bool {
    ANSWERED.replace(false)
}

/// Encodes a method's outcome as a reply.
pub fn reply<C, E>(result: Result<C::Value, E>) -> Reply
where
    C: ValueCodec,
    E: Serialize,
{
    match result {
        Ok(value) if !C::MAY_CARRY_REFERENCES => plain_reply::<C>(value),
        result => tracked_reply::<C, E>(result),
    }
}

/// A reply with a value that cannot carry object references: nothing to track while it
/// is encoded (two thread-local scopes fewer per call).
fn plain_reply<C: ValueCodec>(value: C::Value) -> Reply {
    let value = match C::into_plain(value) {
        Ok(bulk) => return Reply::plain(bulk),
        Err(value) => value,
    };
    let mut message = MessageBuilder::response(Status::Ok);
    match C::encode(value, &mut message) {
        Ok(()) => Reply::new(message),
        Err(e) => not_encoded("result", &e),
    }
}

/// A reply whose value or error may carry object references: what its encoding exports
/// and hands back is tracked.
fn tracked_reply<C, E>(result: Result<C::Value, E>) -> Reply
where
    C: ValueCodec,
    E: Serialize,
{
    let collecting = objref::Collecting::start();
    let (encoded, exported) = objref::tracking_exports(|| match result {
        Ok(value) => {
            let mut message = MessageBuilder::response(Status::Ok);
            C::encode(value, &mut message)
                .map(|()| message)
                .map_err(|e| ("result", e))
        }
        Err(app_error) => {
            let mut message = MessageBuilder::response(Status::AppError);
            encode_inline(&app_error, &mut message)
                .map(|()| message)
                .map_err(|e| ("error", e))
        }
    });
    let handed_back = collecting.finish();
    // Unexported unless the reply reaches the caller as it is: a result that fails to
    // encode becomes an error, and so does one over the caller's frame limit (see
    // `Connection::stamp_response`); the caller could never release what they exported.
    let exported = objref::UnsentExports::of_this_call(exported);
    match encoded {
        Ok(mut message) => {
            // The caller releases what it lists if the result fails to decode there.
            message.end_with_references(exported.handles());
            if !handed_back.is_empty() {
                // The caller holds back our releases until it has decoded this.
                message.set_hands_back();
            }
            Reply {
                message: ReplyMessage::Built(message),
                handed_back: (!handed_back.is_empty()).then(|| Box::new(handed_back)),
                exported,
            }
        }
        Err((what, e)) => not_encoded(what, &e),
    }
}

/// The reply of a method whose `what` (result or error) could not be encoded.
#[cold]
fn not_encoded(what: &str, error: &Error) -> Reply {
    Reply::status(
        Status::Internal,
        &format!(
            "the method's {what} could not be encoded: {}",
            error.message()
        ),
    )
}

/// Compile-time check that `E` can be a remote method's error type (named in the
/// generated code so that a missing bound is reported at the method's return type).
pub fn assert_remote_error<E>()
where
    E: Serialize + DeserializeOwned + From<Error> + Send + 'static,
{
}

/// Compile-time check that `T` can be an inline argument of a remote method (named in the
/// generated code so that a missing bound is reported at the parameter's type).
pub fn assert_argument<T>()
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
}
