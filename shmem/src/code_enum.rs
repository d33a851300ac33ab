//! `code_enum!`: a C-like enum whose discriminants are codes kept in shared
//! memory, in a file or in a message, together with the way back from a
//! code to its variant.
//!
//! The inverse mapping is generated from the same variant list as the
//! discriminants, so the two cannot drift apart when a variant is added;
//! an unknown code (a newer writer, a torn or corrupt word) decodes to
//! `None` and the caller says what that means for it.

/// Declares a `#[repr($repr)]` enum with `Clone, Copy, Debug, PartialEq,
/// Eq`, its `ALL` variants in declaration order and `from_code`, the
/// variant whose discriminant is a code (`None` for an unknown one). With
/// `=> "text"` after every code, also `name`, each variant's text.
///
/// ```
/// shmem::code_enum! {
///     /// A colour, as stored.
///     pub enum Colour: u16 {
///         Red = 1,
///         Green = 2,
///     }
/// }
/// assert_eq!(Colour::from_code(2), Some(Colour::Green));
/// assert_eq!(Colour::from_code(3), None);
/// assert_eq!(Colour::ALL, &[Colour::Red, Colour::Green]);
///
/// shmem::code_enum! {
///     /// A shape, as stored, with its name.
///     pub enum Shape: u32 {
///         Round = 0 => "round",
///         Square = 1 => "square",
///     }
/// }
/// assert_eq!(Shape::from_code(1).map(Shape::name), Some("square"));
/// ```
#[macro_export]
macro_rules! code_enum {
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident : $repr:ident {
            $( $(#[$vm:meta])* $v:ident = $code:literal => $text:literal, )+
        }
    ) => {
        $crate::code_enum! {
            $(#[$m])*
            $vis enum $name: $repr { $( $(#[$vm])* $v = $code, )+ }
        }

        impl $name {
            /// The variant's name, as declared.
            pub fn name(self) -> &'static str {
                match self { $( $name::$v => $text, )+ }
            }
        }
    };
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident : $repr:ident {
            $( $(#[$vm:meta])* $v:ident = $code:literal, )+
        }
    ) => {
        $(#[$m])*
        #[repr($repr)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name { $( $(#[$vm])* $v = $code, )+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$( $name::$v, )+];

            /// The variant whose code is `v` (None: no variant has it).
            pub fn from_code(v: $repr) -> Option<$name> {
                match v {
                    $( $code => Some($name::$v), )+
                    _ => None,
                }
            }
        }
    };
}
