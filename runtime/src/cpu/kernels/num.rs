//! Arithmetic traits over the element types, and the GEMM entry point.

use crate::error::{KernelError, Result};
use crate::tensor::Elem;

/// Element types with arithmetic (all but bool). Integer ops wrap.
pub trait Num: Elem {
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// The smallest value (-inf for floats).
    const LOWEST: Self;
    /// The largest value (+inf for floats).
    const HIGHEST: Self;
    /// `self + o`.
    fn add(self, o: Self) -> Self;
    /// `self - o`.
    fn sub(self, o: Self) -> Self;
    /// `self * o`.
    fn mul(self, o: Self) -> Self;
    /// `self / o`; integer callers first rule out a zero divisor.
    fn div(self, o: Self) -> Self;
    /// `-self`.
    fn neg(self) -> Self;
    /// `|self|`.
    fn abs(self) -> Self;
    /// Whether the value is NaN (never for integers).
    fn is_nan(self) -> bool;
    /// The larger value, NaN if either is NaN.
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || self > o {
            self
        } else {
            o
        }
    }
    /// The smaller value, NaN if either is NaN.
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || self < o {
            self
        } else {
            o
        }
    }
}

macro_rules! int_num {
    ($($t:ty => $abs:path),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            fn neg(self) -> Self { self.wrapping_neg() }
            fn abs(self) -> Self { $abs(self) }
            fn is_nan(self) -> bool { false }
        }
    )*};
}

int_num!(i64 => i64::wrapping_abs, i32 => i32::wrapping_abs, i8 => i8::wrapping_abs, u8 => std::convert::identity);

/// Floating-point element types, with the usual operators.
pub trait Float:
    Num
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// Converts an f32 attribute value.
    fn from_f32(v: f32) -> Self;
    /// e^x.
    fn exp(self) -> Self;
    /// Error function (libm, accurate to about 1 ulp).
    fn erf_libm(self) -> Self;
    /// C ← alpha·A·B + beta·C through matrixmultiply.
    ///
    /// # Safety
    /// The pointers and strides must describe matrices inside live allocations, as for
    /// `matrixmultiply::sgemm`; C's elements must not alias.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: (*const Self, isize, isize),
        b: (*const Self, isize, isize),
        beta: Self,
        c: (*mut Self, isize, isize),
    );
}

macro_rules! float_impl {
    ($t:ty, $erf:path, $gemm:path) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Self {
                self / o
            }
            fn neg(self) -> Self {
                -self
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
        impl Float for $t {
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn erf_libm(self) -> Self {
                $erf(self)
            }
            unsafe fn gemm_raw(
                m: usize,
                k: usize,
                n: usize,
                alpha: Self,
                a: (*const Self, isize, isize),
                b: (*const Self, isize, isize),
                beta: Self,
                c: (*mut Self, isize, isize),
            ) {
                // SAFETY: forwarded from the caller's contract.
                unsafe { $gemm(m, k, n, alpha, a.0, a.1, a.2, b.0, b.1, b.2, beta, c.0, c.1, c.2) }
            }
        }
    };
}

float_impl!(f32, libm::erff, matrixmultiply::sgemm);
float_impl!(f64, libm::erf, matrixmultiply::dgemm);

/// A matrix operand: elements, row stride, column stride (all strides non-negative).
pub type Mat<'a, T> = (&'a [T], usize, usize);

fn fits(len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < len
}

/// C[m×n] ← alpha·A[m×k]·B[k×n] + beta·C, C row-major with row stride `ldc`.
/// Bounds are checked, so a wrong shape is an error, never out-of-bounds access.
/// With beta = 0, C's previous contents are ignored.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Float>(
    (m, k, n): (usize, usize, usize),
    alpha: T,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    beta: T,
    c: &mut [T],
    ldc: usize,
) -> Result<()> {
    let ok = fits(a.0.len(), m, k, a.1, a.2) && fits(b.0.len(), k, n, b.1, b.2) && fits(c.len(), m, n, ldc, 1);
    if !ok || ldc < n {
        return Err(KernelError::invalid(format!("gemm {m}x{k}x{n} exceeds its operands")));
    }
    // SAFETY: every element reached by the strides was checked to lie inside its slice,
    // and C has unit column stride with ldc >= n, so its elements do not alias.
    unsafe {
        T::gemm_raw(
            m,
            k,
            n,
            alpha,
            (a.0.as_ptr(), a.1 as isize, a.2 as isize),
            (b.0.as_ptr(), b.1 as isize, b.2 as isize),
            beta,
            (c.as_mut_ptr(), ldc as isize, 1),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_propagates_through_max_and_min() {
        assert!(f32::NAN.max_nan(1.0).is_nan());
        assert!(1.0f32.max_nan(f32::NAN).is_nan());
        assert!(f32::NAN.min_nan(1.0).is_nan());
        assert!(1.0f32.min_nan(f32::NAN).is_nan());
        assert_eq!(3i64.max_nan(5), 5);
        assert_eq!(3i64.min_nan(5), 3);
    }

    #[test]
    fn gemm_checks_bounds_and_multiplies() {
        let a = [1.0f32, 2.0, 3.0, 4.0]; // [[1,2],[3,4]]
        let b = [5.0f32, 6.0, 7.0, 8.0];
        let mut c = [f32::NAN; 4];
        gemm((2, 2, 2), 1.0, (&a, 2, 1), (&b, 2, 1), 0.0, &mut c, 2).unwrap();
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        // A transposed through strides.
        gemm((2, 2, 2), 1.0, (&a, 1, 2), (&b, 2, 1), 0.0, &mut c, 2).unwrap();
        assert_eq!(c, [26.0, 30.0, 38.0, 44.0]);
        assert!(gemm((3, 2, 2), 1.0, (&a, 2, 1), (&b, 2, 1), 0.0, &mut c, 2).is_err());
    }
}
