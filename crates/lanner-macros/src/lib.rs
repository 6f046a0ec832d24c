//! The `#[lanner::interface]` attribute. Use it through the `lanner` crate; the generated
//! code refers only to `::lanner::__private`.
//!
//! From
//!
//! ```ignore
//! #[lanner::interface]
//! pub trait Calculator {
//!     async fn add(&self, a: u64, b: u64) -> Result<u64, AppError>;
//! }
//! ```
//!
//! it generates the trait (with `Send` futures, so it can be served from any thread),
//! `CalculatorProxy` (a client that implements `Calculator` by calling the remote object)
//! and `CalculatorStub<T>` (serves any `T: Calculator`). Options:
//! `#[lanner::interface(name = "app.Calculator")]` replaces the module path in the id's
//! derivation; `#[lanner::interface(id = "0123…cdef")]` (32 hex digits, dashes allowed)
//! fixes the id outright.
//!
//! An interface may extend others (`trait CalculatorV2: Calculator`, versioning by
//! extension): its stub brings the stubs of the interfaces it extends, so an object serving
//! V2 serves V1 clients too, and its proxy implements the extended traits by calling
//! through their proxies for the same object. The extended interfaces must be lanner
//! interfaces declared in the same module, each written the same way wherever it is
//! named. An interface reached along several paths (`trait V3: V2 + V1` with `V2: V1`, or
//! a diamond: `trait Both: Left + Right` with `Left: Named` and `Right: Named`) is
//! implemented once. Each interface also defines, crate-visible in the macro namespace
//! under its own name, the macro that implements it for an extending proxy and names its
//! bases.
//!
//! A method marked `#[oneway]` (returning `Result<(), E>`) is sent without waiting for an
//! answer: the proxy's call completes once the request is written, and the server runs
//! the method and only returns the call's flow-control credit. Its failures are logged on
//! the server.

use proc_macro::TokenStream;

mod bases;
mod expand;
mod model;
mod options;

/// Turns a trait into a Lanner remote interface. See the `lanner` crate documentation.
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
