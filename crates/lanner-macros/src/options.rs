//! Parsing `#[lanner::interface(name = "…", id = "…")]`.

use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Lit, MetaNameValue, Token};

/// The attribute's options.
#[derive(Default)]
pub(crate) struct Options {
    /// Replaces the module path in the id derivation.
    pub(crate) name: Option<String>,
    /// A fixed id.
    pub(crate) id: Option<u128>,
}

pub(crate) fn parse(attr: TokenStream) -> syn::Result<Options> {
    let mut options = Options::default();
    let pairs = Punctuated::<MetaNameValue, Token![,]>::parse_terminated.parse2(attr)?;
    for pair in pairs {
        let value = match &pair.value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(text),
                ..
            }) => text.clone(),
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "expected a string literal, e.g. name = \"app.Calculator\"",
                ));
            }
        };
        if pair.path.is_ident("name") {
            options.name = Some(value.value());
        } else if pair.path.is_ident("id") {
            let digits: String = value.value().chars().filter(|c| *c != '-').collect();
            if digits.len() != 32 {
                return Err(syn::Error::new_spanned(
                    &value,
                    "an interface id is 32 hex digits (dashes allowed), e.g. \"6f9619ff-8b86-d011-b42d-00c04fc964ff\"",
                ));
            }
            if let Some(bad) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
                return Err(syn::Error::new_spanned(
                    &value,
                    format!(
                        "an interface id is 32 hex digits (dashes allowed); {bad:?} is not one"
                    ),
                ));
            }
            let id = u128::from_str_radix(&digits, 16)
                .map_err(|_| syn::Error::new_spanned(&value, "an interface id is 32 hex digits"))?;
            options.id = Some(id);
        } else {
            return Err(syn::Error::new_spanned(
                &pair.path,
                "unknown option; expected `name = \"…\"` or `id = \"…\"`",
            ));
        }
    }
    Ok(options)
}
