//! The interface as the macro understands it, validated with precise error messages.

use quote::ToTokens;
use syn::{
    FnArg, GenericArgument, Generics, Ident, ItemTrait, Pat, PathArguments, ReturnType, TraitItem,
    TraitItemFn, Type,
};

use crate::options::Options;

/// A validated interface trait.
pub(crate) struct Interface {
    pub(crate) item: ItemTrait,
    pub(crate) options: Options,
    pub(crate) methods: Vec<Method>,
    /// The interfaces this one extends (`trait V2: V1`), as written.
    pub(crate) bases: Vec<syn::Path>,
}

/// One validated method.
pub(crate) struct Method {
    pub(crate) ident: Ident,
    pub(crate) attrs: Vec<syn::Attribute>,
    pub(crate) params: Vec<Param>,
    /// The declared return type, `Result<ok, err>`.
    pub(crate) output: Type,
    pub(crate) ok: Type,
    pub(crate) err: Type,
    /// Canonical signature text: `name(T1,T2)->R`, whitespace removed, prefixed with
    /// `oneway ` for a one-way method (so that both sides must agree on it).
    pub(crate) signature: String,
    /// Declared `#[oneway]`: the caller gets no answer.
    pub(crate) one_way: bool,
}

/// One parameter.
pub(crate) struct Param {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
}

impl Param {
    pub(crate) fn is_bulk(&self) -> bool {
        is_bytes(&self.ty)
    }
}

impl Method {
    pub(crate) fn returns_bulk(&self) -> bool {
        is_bytes(&self.ok)
    }

    /// Whether the success value is written `()`: nothing to encode, and no object
    /// reference to track while encoding it. (An alias of `()` is encoded like any other
    /// inline value, which is correct too, only slower.)
    pub(crate) fn returns_unit(&self) -> bool {
        matches!(plain(&self.ok), Type::Tuple(tuple) if tuple.elems.is_empty())
    }

    /// The parameters encoded together in the inline part, in declaration order.
    pub(crate) fn inline_params(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| !p.is_bulk())
    }

    /// Whether any argument travels inline (else there is nothing to encode or decode).
    pub(crate) fn has_inline_params(&self) -> bool {
        self.inline_params().next().is_some()
    }

    /// The parameters sent as bulk segments, in declaration order.
    pub(crate) fn bulk_params(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| p.is_bulk())
    }
}

/// The supertraits: other lanner interfaces, by path (`Send`, `Sync` and `'static` are
/// added by the macro and may be left out).
fn bases(item: &ItemTrait) -> syn::Result<Vec<syn::Path>> {
    let mut bases = Vec::new();
    for bound in &item.supertraits {
        match bound {
            syn::TypeParamBound::Trait(bound)
                if bound.lifetimes.is_none()
                    && matches!(bound.modifier, syn::TraitBoundModifier::None)
                    && bound.path.segments.iter().all(|s| s.arguments.is_empty()) =>
            {
                let last = &bound
                    .path
                    .segments
                    .last()
                    .expect("a path has a segment")
                    .ident;
                if last != "Send" && last != "Sync" {
                    bases.push(bound.path.clone());
                }
            }
            syn::TypeParamBound::Lifetime(lifetime) if lifetime.ident == "static" => {}
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "a lanner interface may extend only other lanner interfaces (`trait V2: V1`); the macro adds `Send + Sync + 'static` itself",
                ));
            }
        }
    }
    Ok(bases)
}

/// `ty` without the invisible delimiters around a type passed in through a `macro_rules!`
/// fragment (`$t:ty`, as a `Type::Group`) and without parentheses: the type as spelled,
/// which the macro's own tests (`Result<…>`, `Bytes`, `()`) look at.
fn plain(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => plain(&group.elem),
        Type::Paren(paren) => plain(&paren.elem),
        other => other,
    }
}

/// Refuses, with a message naming it, a type that cannot cross the network whatever its
/// traits: one holding a reference (`&str`, `Option<&str>`: `owned` says why), or
/// `impl Trait` (a generic in disguise), rather than leaving the compiler to reject the
/// generated code in terms of it.
fn check_travels(ty: &Type, owned: &str) -> syn::Result<()> {
    let inner: Vec<&Type> = match ty {
        Type::Reference(reference) => return Err(syn::Error::new_spanned(reference, owned)),
        Type::ImplTrait(bounds) => {
            return Err(syn::Error::new_spanned(
                bounds,
                "lanner interface methods cannot take or return `impl Trait`: every call must have fixed types",
            ));
        }
        Type::Group(group) => vec![&group.elem],
        Type::Paren(paren) => vec![&paren.elem],
        Type::Array(array) => vec![&array.elem],
        Type::Slice(slice) => vec![&slice.elem],
        Type::Tuple(tuple) => tuple.elems.iter().collect(),
        Type::Path(path) => path
            .path
            .segments
            .iter()
            .flat_map(|segment| match &segment.arguments {
                PathArguments::AngleBracketed(args) => args
                    .args
                    .iter()
                    .filter_map(|arg| match arg {
                        GenericArgument::Type(ty) => Some(ty),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            })
            .collect(),
        _ => Vec::new(),
    };
    inner
        .into_iter()
        .try_for_each(|ty| check_travels(ty, owned))
}

/// A type spelled `Bytes` (any path ending in `Bytes`, without generics) is a bulk payload.
fn is_bytes(ty: &Type) -> bool {
    match plain(ty) {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "Bytes" && s.arguments.is_empty()),
        _ => false,
    }
}

fn canonical(tokens: &impl ToTokens) -> String {
    tokens
        .to_token_stream()
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

impl Interface {
    pub(crate) fn from_trait(item: ItemTrait, options: Options) -> syn::Result<Interface> {
        reject_generics(&item.generics, "a lanner interface", "its id must be fixed")?;
        let bases = bases(&item)?;
        if let Some(unsafety) = &item.unsafety {
            return Err(syn::Error::new_spanned(
                unsafety,
                "a lanner interface cannot be an unsafe trait",
            ));
        }
        let mut methods = Vec::new();
        for trait_item in &item.items {
            match trait_item {
                TraitItem::Fn(method) => methods.push(Method::from_fn(method)?),
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "a lanner interface may contain only `async fn` methods",
                    ));
                }
            }
        }
        if methods.len() > usize::from(u16::MAX) {
            return Err(syn::Error::new_spanned(
                &item.ident,
                "a lanner interface has at most 65535 methods",
            ));
        }
        Ok(Interface {
            item,
            options,
            methods,
            bases,
        })
    }

    /// The interface signature text the id is derived from.
    pub(crate) fn signature(&self) -> String {
        self.methods
            .iter()
            .map(|m| m.signature.as_str())
            .collect::<Vec<_>>()
            .join(";")
    }
}

impl Method {
    fn from_fn(method: &TraitItemFn) -> syn::Result<Method> {
        let sig = &method.sig;
        if let Some(body) = &method.default {
            return Err(syn::Error::new_spanned(
                body,
                "lanner interface methods cannot have a default body: the proxy implements every method as a remote call",
            ));
        }
        if sig.asyncness.is_none() {
            return Err(syn::Error::new_spanned(
                sig.fn_token,
                "lanner interface methods must be `async fn`",
            ));
        }
        if let Some(token) = sig.constness.as_ref() {
            return Err(syn::Error::new_spanned(
                token,
                "a remote method cannot be `const`",
            ));
        }
        if let Some(token) = sig.unsafety.as_ref() {
            return Err(syn::Error::new_spanned(
                token,
                "a remote method cannot be `unsafe`",
            ));
        }
        reject_generics(
            &sig.generics,
            "lanner interface methods",
            "every call must have fixed types",
        )?;
        if let Some(variadic) = &sig.variadic {
            return Err(syn::Error::new_spanned(
                variadic,
                "variadic methods are not allowed",
            ));
        }
        let mut inputs = sig.inputs.iter();
        match inputs.next() {
            Some(FnArg::Receiver(receiver))
                if receiver.reference.is_some() && receiver.mutability.is_none() => {}
            Some(FnArg::Receiver(receiver)) if receiver.mutability.is_some() => {
                return Err(syn::Error::new_spanned(
                    receiver,
                    "lanner interface methods take `&self`, not `&mut self` (objects may be called concurrently; use interior mutability)",
                ));
            }
            Some(FnArg::Receiver(receiver)) => {
                return Err(syn::Error::new_spanned(
                    receiver,
                    "lanner interface methods take `&self` (a remote object is shared by all its callers and outlives every call)",
                ));
            }
            Some(FnArg::Typed(first)) => {
                return Err(syn::Error::new_spanned(
                    first,
                    "lanner interface methods take `&self` as their first parameter",
                ));
            }
            None => {
                return Err(syn::Error::new_spanned(
                    &sig.ident,
                    "lanner interface methods take `&self` as their first parameter",
                ));
            }
        }
        let mut params = Vec::new();
        for input in inputs {
            let FnArg::Typed(typed) = input else {
                return Err(syn::Error::new_spanned(input, "unexpected receiver"));
            };
            let Pat::Ident(pat) = &*typed.pat else {
                return Err(syn::Error::new_spanned(
                    &typed.pat,
                    "parameters of a lanner interface method must be plain names",
                ));
            };
            if let Some(attr) = typed
                .attrs
                .iter()
                .find(|attr| attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr"))
            {
                // The parameter's attributes are not carried into the generated code: it
                // would be there in every build, whatever the condition says.
                return Err(syn::Error::new_spanned(
                    attr,
                    "a parameter of an interface method cannot be conditional (`#[cfg]`): \
                     both sides must agree on the arguments; declare it always",
                ));
            }
            check_travels(
                &typed.ty,
                "parameters of a lanner interface method must be owned values (they arrive over the network)",
            )?;
            params.push(Param {
                ident: pat.ident.clone(),
                ty: (*typed.ty).clone(),
            });
        }
        let ReturnType::Type(_, output) = &sig.output else {
            return Err(syn::Error::new_spanned(sig, RETURN_TYPE));
        };
        let (ok, err) = split_result(output)?;
        for ty in [&ok, &err] {
            check_travels(
                ty,
                "results and errors of a lanner interface method must be owned values (they arrive over the network)",
            )?;
        }
        let (one_way, attrs) = take_one_way(&method.attrs)?;
        if one_way && canonical(&ok) != "()" {
            return Err(syn::Error::new_spanned(
                &ok,
                "a `#[oneway]` method returns `Result<(), E>`: its caller gets no answer",
            ));
        }
        let types: Vec<String> = params.iter().map(|p| canonical(&p.ty)).collect();
        let signature = format!(
            "{}{}({})->{}",
            if one_way { "oneway " } else { "" },
            // `r#read` and `read` are the same method: the same signature.
            syn::ext::IdentExt::unraw(&sig.ident),
            types.join(","),
            canonical(&**output)
        );
        Ok(Method {
            ident: sig.ident.clone(),
            attrs,
            params,
            output: (**output).clone(),
            ok,
            err,
            signature,
            one_way,
        })
    }
}

/// Finds and removes a `#[oneway]` marker among a method's attributes.
fn take_one_way(attrs: &[syn::Attribute]) -> syn::Result<(bool, Vec<syn::Attribute>)> {
    let mut one_way = false;
    let mut rest = Vec::with_capacity(attrs.len());
    for attr in attrs {
        if attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr") {
            // The method would vanish from the trait but not from the generated proxy,
            // stub and method table, and the two sides' tables would differ by build.
            return Err(syn::Error::new_spanned(
                attr,
                "an interface method cannot be conditional (`#[cfg]`): both sides must see \
                 the same methods; declare it always (and have it fail where it does not \
                 apply), or make the whole interface conditional with `#[cfg]` above \
                 `#[lanner::interface]`",
            ));
        }
        if !attr.path().is_ident("oneway") {
            rest.push(attr.clone());
            continue;
        }
        if !matches!(attr.meta, syn::Meta::Path(_)) {
            return Err(syn::Error::new_spanned(
                attr,
                "`#[oneway]` takes no arguments",
            ));
        }
        if one_way {
            return Err(syn::Error::new_spanned(attr, "duplicate `#[oneway]`"));
        }
        one_way = true;
    }
    Ok((one_way, rest))
}

/// `subject` (the interface or its methods) may have neither generic parameters nor a
/// `where` clause; `why` says what generics would break.
fn reject_generics(generics: &Generics, subject: &str, why: &str) -> syn::Result<()> {
    if !generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            generics,
            format!("{subject} cannot be generic: {why}"),
        ));
    }
    if let Some(where_clause) = &generics.where_clause {
        return Err(syn::Error::new_spanned(
            where_clause,
            format!("{subject} cannot have a `where` clause"),
        ));
    }
    Ok(())
}

const RETURN_TYPE: &str = "lanner interface methods must return `Result<T, E>` where `E: From<lanner::Error>` (use `lanner::Error` itself if the method has no errors of its own)";

fn split_result(output: &Type) -> syn::Result<(Type, Type)> {
    let error = || syn::Error::new_spanned(output, RETURN_TYPE);
    let Type::Path(path) = plain(output) else {
        return Err(error());
    };
    let last = path.path.segments.last().ok_or_else(error)?;
    if last.ident != "Result" {
        return Err(error());
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return Err(error());
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    match types.as_slice() {
        [ok, err] => Ok(((*ok).clone(), (*err).clone())),
        _ => Err(error()),
    }
}
