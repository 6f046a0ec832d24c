//! The `#[lanner::interface]` attribute. Use it through the `lanner` crate, as
//! `#[lanner::interface]`; its documentation, with the options and the types it
//! generates, is on [`macro@interface`]. The generated code refers only to
//! `::lanner::__private`.

use proc_macro::TokenStream;

mod bases;
mod expand;
mod model;
mod options;

/// Turns a trait into a Lanner remote interface.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[lanner::interface]
/// pub trait Calculator {
///     async fn add(&self, a: i64, b: i64) -> Result<i64, CalcError>;
///     async fn divide(&self, a: i64, b: i64) -> Result<i64, CalcError>;
/// }
///
/// #[derive(Debug, Serialize, Deserialize)]
/// pub enum CalcError {
///     DivisionByZero,
///     Rpc(lanner::Error),
/// }
///
/// impl From<lanner::Error> for CalcError {
///     fn from(error: lanner::Error) -> Self {
///         CalcError::Rpc(error)
///     }
/// }
/// ```
///
/// # What it generates
///
/// - The trait itself, with `Send + Sync + 'static` added to its bounds and each method's
///   future made `Send`, so an implementation can be served from any thread.
/// - `CalculatorProxy`: a client for the interface that implements `Calculator` by calling
///   a remote object, so code written against the trait works with a local object or a
///   remote one. It implements `lanner::Proxy`: get one with `lanner::connect`,
///   `Client::connect` or `Proxy::query`; cloning it is cheap.
/// - `CalculatorStub<T>`: serves any `T: Calculator`. Put it in an object with
///   `lanner::Object::new(CalculatorStub::new(Arc::new(value)))`, adding the stubs of the
///   object's other interfaces with `.with(...)`.
/// - The interface's identity, as constants of the proxy's `lanner::Proxy`
///   implementation: `INTERFACE_ID`, a 128-bit id derived from the trait's path (its
///   module path and name) and every method's signature; `INTERFACE_NAME`; and `METHODS`,
///   each method's ordinal and signature fingerprint. Every call carries the fingerprint,
///   so a client whose signature of a method differs from the server's gets
///   `Unimplemented`, never garbled data.
///
/// # Methods
///
/// Every item of the trait is an `async fn` taking `&self` and owned arguments, returning
/// `Result<T, E>`, without a default body, generics, a `where` clause or `#[cfg]`:
///
/// - Arguments and `T` are any serde types. A parameter or result whose type is spelled
///   `Bytes` (`lanner::Bytes`, that is `bytes::Bytes`) is a bulk payload, sent apart from
///   the encoded values (how it travels on each transport is in the `lanner` crate's
///   documentation, "Bulk payloads"); nested in another type it is not.
/// - `lanner::ObjRef<P>` (with `P` a generated proxy type) as an argument or a result
///   passes an object by reference.
/// - `E` is serde and implements `From<lanner::Error>`, through which failures of the
///   call itself (connection lost, deadline, refused) reach the caller. Use
///   `lanner::Error` itself if the method has no errors of its own.
///
/// # Options
///
/// - `#[lanner::interface(name = "app.Calculator")]` derives the id from this name
///   instead of the trait's module path and name, so the trait can move between modules
///   or crates without changing its id (the methods' signatures still go into it).
/// - `#[lanner::interface(id = "6f9619ff-8b86-d011-b42d-00c04fc964ff")]` fixes the id
///   outright (32 hex digits, dashes allowed). Then adding a method at the end of the
///   trait keeps the id; without it, any new method changes the id, since the id covers
///   every signature.
///
/// # One-way methods
///
/// A method marked `#[oneway]` returns `Result<(), E>` and is sent without waiting for an
/// answer: the caller's future completes once the request is written or queued, and the
/// server runs the method and returns only the call's flow-control credit, so a flood of
/// one-way calls is throttled like any other. Its failures are logged on the server; the
/// caller sees only failures to send (the connection is gone, say).
///
/// ```
/// #[lanner::interface]
/// pub trait Listener {
///     #[oneway]
///     async fn notify(&self, event: String) -> Result<(), lanner::Error>;
/// }
/// ```
///
/// # Extending interfaces
///
/// An interface may extend others (`trait CalculatorV2: Calculator`): versioning by
/// extension. Its stub brings the stubs of the interfaces it extends, so an object served
/// with `CalculatorV2Stub` serves version-1 clients too, and `CalculatorV2Proxy`
/// implements `Calculator` as well, calling through the same object. The extended
/// interfaces must be Lanner interfaces declared in the same module, each written the same
/// way wherever it is named. An interface reached along several paths (`trait V3: V2 + V1`
/// with `V2: V1`, or a diamond: `trait Both: Left + Right` with `Left: Named` and
/// `Right: Named`) is implemented once.
///
/// ```
/// #[lanner::interface(name = "app.Calculator")]
/// pub trait Calculator {
///     async fn add(&self, a: i64, b: i64) -> Result<i64, lanner::Error>;
/// }
///
/// #[lanner::interface(name = "app.CalculatorV2")]
/// pub trait CalculatorV2: Calculator {
///     async fn power(&self, base: i64, exp: u32) -> Result<i64, lanner::Error>;
/// }
///
/// struct Desk;
///
/// impl Calculator for Desk {
///     async fn add(&self, a: i64, b: i64) -> Result<i64, lanner::Error> {
///         Ok(a + b)
///     }
/// }
///
/// impl CalculatorV2 for Desk {
///     async fn power(&self, base: i64, exp: u32) -> Result<i64, lanner::Error> {
///         Ok(base.pow(exp))
///     }
/// }
///
/// // Serves `CalculatorV2` and `Calculator` alike.
/// let object = lanner::Object::new(CalculatorV2Stub::new(std::sync::Arc::new(Desk)));
/// # drop(object);
/// ```
///
/// To implement it for an extending proxy, each interface also defines, visible in its
/// crate in the macro namespace under the trait's own name, a macro the generated code of
/// the extending interfaces uses.
#[proc_macro_attribute]
pub fn interface(attr: TokenStream, item: TokenStream) -> TokenStream {
    let options = match options::parse(attr.into()) {
        Ok(options) => options,
        Err(error) => return error.to_compile_error().into(),
    };
    let item = syn::parse_macro_input!(item as syn::ItemTrait);
    match model::Interface::from_trait(item, options) {
        Ok(interface) => expand::expand(&interface).into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// One step of implementing, for a proxy, the interfaces its interface extends (see the
/// `bases` module). Generated code only.
#[doc(hidden)]
#[proc_macro]
pub fn implement_bases(input: TokenStream) -> TokenStream {
    let walk = syn::parse_macro_input!(input as bases::Walk);
    bases::step(walk).into()
}
