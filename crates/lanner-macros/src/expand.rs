//! Code generation: the trait, its proxy and its stub.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::model::{Interface, Method};

pub(crate) fn expand(interface: &Interface) -> TokenStream {
    let trait_tokens = expand_trait(interface);
    let proxy = expand_proxy(interface);
    let stub = expand_stub(interface);
    let extension = expand_extension(interface);
    quote! {
        #trait_tokens
        #proxy
        #stub
        #extension
    }
}

/// `path` with `suffix` appended to its last segment (`a::Calculator` → `a::CalculatorProxy`).
pub(crate) fn suffixed(path: &syn::Path, suffix: &str) -> syn::Path {
    let mut path = path.clone();
    let last = path.segments.last_mut().expect("a path has a segment");
    last.ident = format_ident!("{}{}", last.ident, suffix);
    path
}

/// A macro, in the macro namespace under the trait's own name (crate-visible), that
/// implements this interface for the proxy of an interface extending it, by calling
/// through this interface's proxy for the same object (whose object lists this interface
/// too). Paths inside resolve where the extending interface is declared, so interfaces
/// that extend one another live in the same module.
fn expand_extension(interface: &Interface) -> TokenStream {
    let trait_ident = &interface.item.ident;
    let macro_ident = format_ident!("__lanner_extend_{}", trait_ident);
    let base_var = local("base");
    let methods = interface.methods.iter().map(|method| {
        let name = &method.ident;
        let output = &method.output;
        let params = typed_params(method);
        let args = method.params.iter().map(|p| &p.ident);
        quote! {
            fn #name(&self, #(#params),*)
                -> impl ::lanner::__private::Future<Output = #output> + ::core::marker::Send
            {
                let #base_var = ::lanner::__private::Proxy::query::<$base>(self);
                async move {
                    match #base_var {
                        ::core::result::Result::Ok(#base_var) => {
                            <$base as $interface>::#name(&#base_var, #(#args),*).await
                        }
                        ::core::result::Result::Err(error) => {
                            ::core::result::Result::Err(::core::convert::From::from(error))
                        }
                    }
                }
            }
        }
    });
    let bases = &interface.bases;
    quote! {
        #[doc(hidden)]
        #[allow(unused_macros)]
        macro_rules! #macro_ident {
            ($proxy:ty, $interface:path, $base:path) => {
                // Calling a method deprecated in the trait is the proxy's job, not a use.
                #[allow(deprecated)]
                impl $interface for $proxy {
                    #(#methods)*
                }
            };
            (@bases $($walk:tt)*) => {
                ::lanner::__private::implement_bases! { $($walk)* more = [#(#bases),*]; }
            };
        }
        #[doc(hidden)]
        #[allow(unused_imports)]
        pub(crate) use #macro_ident as #trait_ident;
    }
}

fn expand_trait(interface: &Interface) -> TokenStream {
    let item = &interface.item;
    let attrs = &item.attrs;
    let vis = &item.vis;
    let ident = &item.ident;
    let bases = &interface.bases;
    let methods = interface.methods.iter().map(|method| {
        let attrs = &method.attrs;
        let name = &method.ident;
        let output = &method.output;
        let params = typed_params(method);
        quote! {
            #(#attrs)*
            fn #name(&self, #(#params),*)
                -> impl ::lanner::__private::Future<Output = #output> + ::core::marker::Send;
        }
    });
    quote! {
        #(#attrs)*
        #vis trait #ident: #(#bases +)* ::core::marker::Send + ::core::marker::Sync + 'static {
            #(#methods)*
        }
    }
}

/// The method's parameters as declared, `name: Type`, without the receiver.
fn typed_params(method: &Method) -> impl Iterator<Item = TokenStream> + '_ {
    method.params.iter().map(|p| {
        let (ident, ty) = (&p.ident, &p.ty);
        quote! { #ident: #ty }
    })
}

/// The most elements a tuple may have and still be a serde type (serde implements its
/// traits for tuples of up to 16).
const TUPLE_MAX: usize = 16;

/// `items` as a tuple (`(a, b,)`), nested in tuples of at most [`TUPLE_MAX`] elements
/// when there are more: `((a1, …, a16,), (a17,),)`. Postcard writes a tuple as its
/// elements one after the other, so the nesting changes nothing on the wire: a method's
/// inline arguments encode the same however many there are. The parentheses have `span`,
/// for diagnostics about the tuple as a whole.
fn tuple(items: Vec<TokenStream>, span: Span) -> TokenStream {
    if items.len() <= TUPLE_MAX {
        return quote_spanned! {span=> (#(#items,)*) };
    }
    let groups: Vec<TokenStream> = items
        .chunks(TUPLE_MAX)
        .map(|chunk| tuple(chunk.to_vec(), span))
        .collect();
    tuple(groups, span)
}

/// The method's inline arguments as a tuple of their names (a pattern, or an expression).
fn inline_names(method: &Method, span: Span) -> TokenStream {
    tuple(
        method
            .inline_params()
            .map(|p| p.ident.to_token_stream())
            .collect(),
        span,
    )
}

/// The type of [`inline_names`].
fn inline_types(method: &Method, span: Span) -> TokenStream {
    tuple(
        method
            .inline_params()
            .map(|p| p.ty.to_token_stream())
            .collect(),
        span,
    )
}

/// A variable of the generated code. Mixed-site hygiene keeps it apart from the user's
/// parameters, whatever they are called (a parameter named `method` or `call` must not
/// shadow it, nor be shadowed by it).
fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

fn codec(method: &Method) -> TokenStream {
    let ok = &method.ok;
    if method.returns_bulk() {
        quote_spanned! {ok.span()=> ::lanner::__private::Bulk }
    } else if method.returns_unit() {
        quote_spanned! {ok.span()=> ::lanner::__private::Unit }
    } else {
        quote_spanned! {ok.span()=> ::lanner::__private::Inline<#ok> }
    }
}

fn expand_proxy(interface: &Interface) -> TokenStream {
    let item = &interface.item;
    let vis = &item.vis;
    let trait_ident = &item.ident;
    let proxy = format_ident!("{}Proxy", trait_ident);
    let trait_name = syn::ext::IdentExt::unraw(trait_ident).to_string();
    let signature = interface.signature();
    let id = match (interface.options.id, &interface.options.name) {
        (Some(id), _) => quote! { ::lanner::__private::InterfaceId::from_u128(#id) },
        (None, Some(name)) => {
            quote! { ::lanner::__private::InterfaceId::derive(#name, #signature) }
        }
        (None, None) => quote! {
            ::lanner::__private::InterfaceId::derive(
                ::core::concat!(::core::module_path!(), "::", #trait_name),
                #signature,
            )
        },
    };
    let infos = interface
        .methods
        .iter()
        .enumerate()
        .map(|(ordinal, method)| {
            // A keyword method (`r#type`) is named without its prefix: access rules name
            // methods as `"type"`, and messages should too.
            let name = syn::ext::IdentExt::unraw(&method.ident).to_string();
            let ordinal = ordinal as u16;
            let signature = &method.signature;
            quote! {
                ::lanner::__private::MethodInfo {
                    name: #name,
                    ordinal: #ordinal,
                    fingerprint: ::lanner::__private::method_fingerprint(#signature),
                    signature: #signature,
                }
            }
        });
    let methods = interface.methods.iter().enumerate().map(|(ordinal, method)| {
        let name = &method.ident;
        let output = &method.output;
        let err = &method.err;
        let codec = codec(method);
        let params = typed_params(method);
        let inline = inline_names(method, name.span());
        let bulk: Vec<_> = method.bulk_params().map(|p| &p.ident).collect();
        let bulk_count = bulk.len();
        let error_check = quote_spanned! {err.span()=>
            let _: fn() = ::lanner::__private::assert_remote_error::<#err>;
        };
        // Named here so that an argument type that cannot travel is reported at its
        // declaration rather than at the attribute.
        let argument_checks = method.inline_params().map(|p| {
            let ty = &p.ty;
            quote_spanned! {ty.span()=>
                let _: fn() = ::lanner::__private::assert_argument::<#ty>;
            }
        });
        let (method_var, segments_var, request_var, core_var, to_var, error_var) = (
            local("method"),
            local("segments"),
            local("request"),
            local("core"),
            local("to"),
            local("error"),
        );
        // `self` stays out of the spanned tokens: a method name passed in through a
        // `macro_rules!` would give it another hygiene context than the receiver's.
        // The request is built once the reference has settled the connection the call goes
        // on, so that object references among the arguments are handed to that connection.
        let request = if !method.has_inline_params() {
            quote_spanned! {name.span()=>
                ::lanner::__private::request_without_inline(&#to_var, #method_var, #segments_var)
            }
        } else {
            quote_spanned! {name.span()=>
                ::lanner::__private::request(&#to_var, #method_var, &#inline, #segments_var)
            }
        };
        // Spanned at the declared types so that a result or error type that cannot travel is
        // reported at the method's return type, not at the attribute.
        let future = quote_spanned! {output.span()=>
            impl ::lanner::__private::Future<Output = #output> + ::core::marker::Send
        };
        // Spanned like the future, for the same reason.
        let send = if method.one_way {
            quote_spanned! {output.span()=>
                ::lanner::__private::invoke_one_way::<#err>(#to_var, #request_var).await
            }
        } else {
            quote_spanned! {output.span()=>
                ::lanner::__private::invoke::<#codec, #err>(&#to_var, #method_var, #request_var)
                    .await
            }
        };
        quote! {
            fn #name(&self, #(#params),*) -> #future {
                #error_check
                #(#argument_checks)*
                let #core_var = &self.core;
                let #method_var = &<Self as ::lanner::__private::Proxy>::METHODS[#ordinal];
                async move {
                    let #to_var = match ::lanner::__private::destination(#core_var).await {
                        ::core::result::Result::Ok(#to_var) => #to_var,
                        ::core::result::Result::Err(#error_var) => {
                            return ::core::result::Result::Err(
                                <#err as ::core::convert::From<::lanner::__private::Error>>::from(
                                    #error_var,
                                ),
                            );
                        }
                    };
                    let #segments_var: [::lanner::__private::Bytes; #bulk_count] = [#(#bulk),*];
                    let #request_var = #request;
                    #send
                }
            }
        }
    });
    let bases_for_proxy = crate::bases::Walk::start(&quote! { #proxy }, &interface.bases);
    let doc = format!(
        "Client proxy for [`{trait_name}`]: implements the trait by calling a remote object. \
         Obtain one with `lanner::connect::<{trait_name}Proxy>(url)` or \
         `ObjectRef::query`; cloning is cheap."
    );
    quote! {
        #[doc = #doc]
        #[derive(::core::clone::Clone, ::core::fmt::Debug)]
        #vis struct #proxy {
            core: ::lanner::__private::ProxyCore,
        }

        impl ::lanner::__private::Proxy for #proxy {
            const INTERFACE_ID: ::lanner::__private::InterfaceId = #id;
            const INTERFACE_NAME: &'static str =
                ::core::concat!(::core::module_path!(), "::", #trait_name);
            const METHODS: &'static [::lanner::__private::MethodInfo] = &[#(#infos),*];

            fn __from_core(core: ::lanner::__private::ProxyCore) -> Self {
                #proxy { core }
            }

            fn __core(&self) -> &::lanner::__private::ProxyCore {
                &self.core
            }
        }

        // Implementing or naming an interface deprecated (the trait, or some of its
        // methods) is the generated code's job, not a use of it: no warnings for it.
        #[allow(deprecated)]
        impl #trait_ident for #proxy {
            #(#methods)*
        }

        #bases_for_proxy
    }
}

fn expand_stub(interface: &Interface) -> TokenStream {
    let item = &interface.item;
    let vis = &item.vis;
    let trait_ident = &item.ident;
    let proxy = format_ident!("{}Proxy", trait_ident);
    let stub = format_ident!("{}Stub", trait_ident);
    // The implementation's type in the stub's impls that name the user's types: not `T`,
    // which would hide a user type called `T` from the argument and result types.
    let implementation = format_ident!("__LannerImplementation");
    let (call, this, methods, ordinal_var, interface_var) = (
        local("call"),
        local("this"),
        local("methods"),
        local("ordinal"),
        local("interface"),
    );
    let arms = interface.methods.iter().enumerate().map(|(index, method)| {
        let ordinal = index as u16;
        let name = &method.ident;
        let err = &method.err;
        let codec = codec(method);
        let inline_idents = inline_names(method, Span::call_site());
        let inline_types = inline_types(method, Span::call_site());
        let bulk = method.bulk_params().enumerate().map(|(segment, p)| {
            let ident = &p.ident;
            quote! {
                let #ident = match #call.__segment(#segment) {
                    ::core::result::Result::Ok(segment) => segment,
                    ::core::result::Result::Err(answer) => return answer,
                };
            }
        });
        let args = method.params.iter().map(|p| &p.ident);
        // Spanned at the method (arguments) and at its result type (the reply) so that type
        // errors point into the trait, not at the attribute.
        let arguments = if !method.has_inline_params() {
            quote_spanned! {name.span()=>
                ::lanner::__private::no_arguments(&#call, &#methods[#index], #interface_var)
            }
        } else {
            quote_spanned! {name.span()=>
                ::lanner::__private::arguments(&#call, &#methods[#index], #interface_var)
            }
        };
        let run = quote_spanned! {method.ok.span()=>
            ::lanner::__private::Box::pin(async move {
                ::lanner::__private::reply::<#codec, #err>(
                    <#implementation as #trait_ident>::#name(&*#this, #(#args),*).await
                )
            })
        };
        // A refused call's arguments are decoded, then dropped with the refusal as the
        // answer: that releases the object references among them (see
        // `IncomingCall::__find`). The refusal and a failure to decode are answered by
        // `arguments`, so each method's own code here is short.
        quote! {
            #ordinal => {
                let #inline_idents: #inline_types = match #arguments {
                    ::core::result::Result::Ok(args) => args,
                    ::core::result::Result::Err(answer) => return answer,
                };
                #(#bulk)*
                #run
            }
        }
    });
    let base_stubs = interface.bases.iter().map(|base| {
        let base_stub = suffixed(base, "Stub");
        let base_var = local("base");
        let all = local("all");
        quote! {
            let #base_var = #base_stub::new(<::lanner::__private::Arc<#implementation> as ::core::clone::Clone>::clone(&self.inner));
            ::core::iter::Extend::extend(&mut #all, ::lanner::__private::Stub::bases(&#base_var));
            #all.push(::lanner::__private::Arc::new(#base_var));
        }
    });
    let all = local("all");
    let bases_fn = if interface.bases.is_empty() {
        quote! {}
    } else {
        quote! {
            fn bases(&self) -> ::std::vec::Vec<::lanner::__private::Arc<dyn ::lanner::__private::Stub>> {
                let mut #all: ::std::vec::Vec<::lanner::__private::Arc<dyn ::lanner::__private::Stub>> =
                    ::std::vec::Vec::new();
                #(#base_stubs)*
                #all
            }
        }
    };
    let trait_name = trait_ident.to_string();
    let doc = format!(
        "Server stub for [`{trait_name}`]: serves any `T: {trait_name}`. Put it in a \
         `lanner::Object` with `Object::new({trait_name}Stub::new(Arc::new(value)))`."
    );
    quote! {
        #[doc = #doc]
        #vis struct #stub<T> {
            inner: ::lanner::__private::Arc<T>,
        }

        #[allow(deprecated)]
        impl<T: #trait_ident> #stub<T> {
            /// A stub serving `inner`.
            pub fn new(inner: ::lanner::__private::Arc<T>) -> Self {
                #stub { inner }
            }
        }

        impl<T> ::core::clone::Clone for #stub<T> {
            fn clone(&self) -> Self {
                #stub { inner: <::lanner::__private::Arc<T> as ::core::clone::Clone>::clone(&self.inner) }
            }
        }

        #[allow(deprecated)]
        impl<#implementation: #trait_ident> ::lanner::__private::Stub for #stub<#implementation> {
            fn interface_id(&self) -> ::lanner::__private::InterfaceId {
                <#proxy as ::lanner::__private::Proxy>::INTERFACE_ID
            }

            fn interface_name(&self) -> &'static str {
                <#proxy as ::lanner::__private::Proxy>::INTERFACE_NAME
            }

            fn methods(&self) -> &'static [::lanner::__private::MethodInfo] {
                <#proxy as ::lanner::__private::Proxy>::METHODS
            }

            #bases_fn

            fn dispatch(
                &self,
                #call: ::lanner::__private::IncomingCall<'_>,
            ) -> ::lanner::__private::DispatchFuture {
                Self::__serve(<::lanner::__private::Arc<#implementation> as ::core::clone::Clone>::clone(&self.inner), #call)
            }

            fn __direct(&self) -> ::core::option::Option<::lanner::__private::Direct> {
                ::core::option::Option::Some(::lanner::__private::Direct::new(
                    <::lanner::__private::Arc<#implementation> as ::core::clone::Clone>::clone(&self.inner),
                    Self::__serve,
                ))
            }
        }

        #[allow(deprecated)]
        impl<#implementation: #trait_ident> #stub<#implementation> {
            /// Serves one call on the implementation `target` (a `T`).
            fn __serve(
                target: ::lanner::__private::Implementation,
                #call: ::lanner::__private::IncomingCall<'_>,
            ) -> ::lanner::__private::DispatchFuture {
                let #this = match ::lanner::__private::Direct::downcast::<#implementation>(target) {
                    ::core::result::Result::Ok(this) => this,
                    ::core::result::Result::Err(reply) => return reply,
                };
                let #methods = <#proxy as ::lanner::__private::Proxy>::METHODS;
                let #interface_var = <#proxy as ::lanner::__private::Proxy>::INTERFACE_NAME;
                let #ordinal_var = match #call.__find(#interface_var, #methods) {
                    ::core::result::Result::Ok(ordinal) => ordinal,
                    ::core::result::Result::Err(answer) => return answer,
                };
                match #ordinal_var {
                    #(#arms)*
                    _ => {
                        let reply = ::lanner::__private::Reply::unknown_method(#ordinal_var);
                        ::lanner::__private::answered(reply)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize) -> Vec<TokenStream> {
        (1..=count)
            .map(|n| format_ident!("a{}", n).to_token_stream())
            .collect()
    }

    #[test]
    fn up_to_sixteen_arguments_are_one_tuple() {
        let out = tuple(names(2), Span::call_site()).to_string();
        assert_eq!(out, quote! { (a1, a2,) }.to_string());
        let out = tuple(names(16), Span::call_site()).to_string();
        assert_eq!(out.matches('(').count(), 1, "{out}");
    }

    #[test]
    fn more_arguments_are_nested_in_tuples_serde_implements() {
        let out = tuple(names(17), Span::call_site()).to_string();
        let expected = quote! {
            ((a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,), (a17,),)
        };
        assert_eq!(out, expected.to_string());
        // 16 × 16 + 1: the groups themselves are nested again.
        let out = tuple(names(257), Span::call_site()).to_string();
        assert!(out.starts_with("((("), "{out}");
    }
}
