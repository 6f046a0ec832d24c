//! Implementing, for a proxy, every interface its interface extends, directly or through
//! others, each exactly once.
//!
//! The attribute on one trait sees only the bases that trait names, not theirs: those are
//! known to each base's own generated macro (see `expand::expand_extension`). So the
//! interfaces are visited one at a time, passing the walk's state through the macros:
//! [`step`] takes the next interface still to visit, implements it for the proxy (unless
//! it was implemented already: an interface reached along two paths, a "diamond"), and
//! asks that interface's macro to call [`step`] again with its own bases added. Interfaces
//! are told apart by how they are written, so each must be written the same way wherever
//! it is named (interfaces that extend one another live in one module anyway).

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Path, Token, Type, bracketed};

use crate::expand::suffixed;

/// The state of a walk: `proxy = T; todo = [..]; done = [..];`, and after an interface's
/// macro answered, `more = [..];` (that interface's own bases).
pub(crate) struct Walk {
    proxy: Type,
    todo: Vec<Path>,
    done: Vec<Path>,
    more: Vec<Path>,
}

impl Walk {
    /// The start of a walk for `proxy` over the interfaces `bases` extends.
    pub(crate) fn start(proxy: &TokenStream, bases: &[Path]) -> TokenStream {
        if bases.is_empty() {
            return TokenStream::new();
        }
        quote! {
            ::lanner::__private::implement_bases! {
                proxy = #proxy; todo = [#(#bases),*]; done = [];
            }
        }
    }
}

fn paths(input: ParseStream, name: &str) -> syn::Result<Vec<Path>> {
    let key: syn::Ident = input.parse()?;
    if key != name {
        return Err(syn::Error::new(key.span(), format!("expected `{name}`")));
    }
    input.parse::<Token![=]>()?;
    let content;
    bracketed!(content in input);
    let list = Punctuated::<Path, Token![,]>::parse_terminated(&content)?;
    input.parse::<Token![;]>()?;
    Ok(list.into_iter().collect())
}

impl Parse for Walk {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key: syn::Ident = input.parse()?;
        if key != "proxy" {
            return Err(syn::Error::new(key.span(), "expected `proxy`"));
        }
        input.parse::<Token![=]>()?;
        let proxy: Type = input.parse()?;
        input.parse::<Token![;]>()?;
        let todo = paths(input, "todo")?;
        let done = paths(input, "done")?;
        let more = if input.is_empty() {
            Vec::new()
        } else {
            paths(input, "more")?
        };
        Ok(Walk {
            proxy,
            todo,
            done,
            more,
        })
    }
}

/// How an interface is told apart from others in a walk.
fn key(path: &Path) -> String {
    path.to_token_stream().to_string()
}

/// One step of the walk (see the module documentation).
pub(crate) fn step(walk: Walk) -> TokenStream {
    let Walk {
        proxy,
        mut todo,
        mut done,
        more,
    } = walk;
    todo.extend(more);
    todo.retain(|path| !done.iter().any(|seen| key(seen) == key(path)));
    if todo.is_empty() {
        return TokenStream::new();
    }
    let next = todo.remove(0);
    let next_proxy = suffixed(&next, "Proxy");
    done.push(next.clone());
    quote! {
        #next!(#proxy, #next, #next_proxy);
        #next!(@bases proxy = #proxy; todo = [#(#todo),*]; done = [#(#done),*];);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step_of(input: TokenStream) -> String {
        step(syn::parse2(input).unwrap()).to_string()
    }

    #[test]
    fn a_step_implements_the_next_interface_and_asks_it_for_its_bases() {
        let out = step_of(quote! { proxy = BothProxy; todo = [Left, Right]; done = []; });
        let expected = quote! {
            Left!(BothProxy, Left, LeftProxy);
            Left!(@bases proxy = BothProxy; todo = [Right]; done = [Left];);
        };
        assert_eq!(out, expected.to_string());
    }

    #[test]
    fn an_interface_already_implemented_is_skipped() {
        // `Right` answered that it extends `Named`, which `Left` brought already.
        let out = step_of(quote! {
            proxy = BothProxy; todo = []; done = [Left, Named, Right]; more = [Named];
        });
        assert!(out.is_empty(), "{out}");
        let out = step_of(quote! {
            proxy = P; todo = [Named, Other]; done = [Named]; more = [Named];
        });
        assert!(out.starts_with(&quote! { Other!(P, Other, OtherProxy); }.to_string()));
    }

    #[test]
    fn a_malformed_walk_is_refused() {
        assert!(syn::parse2::<Walk>(quote! { proxy = P; done = []; }).is_err());
        assert!(syn::parse2::<Walk>(quote! { todo = []; }).is_err());
    }
}
