//! Einsum, lowered at import to the ops lms runs: per operand a `ReduceSum` over the
//! labels only it holds and a `Transpose` that groups its labels (batch, kept, contracted),
//! `Reshape`s to the three-axis form of a batched matrix product, one `MatMul`, then a
//! `Reshape` and `Transpose` into the output's order. The contractions attention exports
//! use (`bhqd,bhkd->bhqk`, `bhqk,bhkd->bhqd`, `bij,bjk->bik`, `bsd,de->bse`, ...) take a
//! `MatMul` and at most one `Transpose` per operand, and a `Reshape` only where labels
//! merge (`bhsd,hde->bse`); their gradients are those ops'.
//! One or two operands, letters and one `...` per term, the implicit output (`...` first,
//! then the letters used once, in alphabetical order); a label repeated within one operand
//! (a diagonal or trace), more than two operands and a label whose sizes differ between
//! operands (broadcasting) are refused.

/// One op of a lowering; every op reads the previous step's output (the first, the operand).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `ReduceSum` over `axes`, not keeping them.
    ReduceSum(Vec<i64>),
    /// `Transpose` by `perm`.
    Transpose(Vec<i64>),
    /// `Reshape` to this target (0: keep the input's axis there).
    Reshape(Vec<i64>),
    /// `Identity` (a one-operand equation that changes nothing).
    Identity,
}

/// The ops an equation lowers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lowering {
    /// The steps of each operand before the product (for one operand, all of them).
    pub operands: Vec<Vec<Step>>,
    /// The steps after the `MatMul` of the two operands (two operands only).
    pub after: Vec<Step>,
}

/// A label: a letter, or an axis of `...` (numbered from its last axis).
type Label = u32;
const ELLIPSIS_BASE: Label = 0x1_0000;

/// Lowers `equation` over operands of shapes `shapes`; the error names what is refused.
pub fn lower(equation: &str, shapes: &[&[usize]]) -> Result<Lowering, String> {
    let compact: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match compact.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (compact.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != shapes.len() {
        return Err(format!("names {} operands, the node has {}", terms.len(), shapes.len()));
    }
    if !(1..=2).contains(&terms.len()) {
        return Err(format!("has {} operands; lms lowers one or two", terms.len()));
    }
    let inputs: Vec<Vec<Label>> =
        terms.iter().zip(shapes).map(|(t, s)| labels(t, Some(s.len()))).collect::<Result<_, _>>()?;
    let mut sizes: std::collections::HashMap<Label, usize> = Default::default();
    for (labels, shape) in inputs.iter().zip(shapes) {
        for (i, (&l, &size)) in labels.iter().zip(shape.iter()).enumerate() {
            if labels[..i].contains(&l) {
                return Err(format!("repeats '{}' within one operand (a diagonal), which lms does not lower", show(l)));
            }
            if *sizes.entry(l).or_insert(size) != size {
                return Err(format!(
                    "gives '{}' sizes {} and {size} (broadcasting is not lowered)",
                    show(l),
                    sizes[&l]
                ));
            }
        }
    }
    let output = match rhs {
        Some(r) => {
            let widest = inputs.iter().map(|l| l.iter().filter(|&&l| l >= ELLIPSIS_BASE).count()).max().unwrap_or(0);
            let out = labels(r, None)?
                .into_iter()
                .flat_map(|l| {
                    if l == ELLIPSIS_BASE - 1 {
                        (0..widest).rev().map(|k| ELLIPSIS_BASE + k as Label).collect()
                    } else {
                        vec![l]
                    }
                })
                .collect::<Vec<_>>();
            for (i, l) in out.iter().enumerate() {
                if out[..i].contains(l) || !sizes.contains_key(l) {
                    return Err(format!("has output label '{}' repeated or in no operand", show(*l)));
                }
            }
            out
        }
        None => implicit_output(&inputs),
    };
    let others = |i: usize| -> Vec<Label> {
        inputs.iter().enumerate().filter(|&(j, _)| j != i).flat_map(|(_, l)| l.clone()).collect()
    };
    // Labels only one operand holds and the output drops are summed first.
    let mut operands = Vec::new();
    let mut kept = Vec::new();
    for (i, labels) in inputs.iter().enumerate() {
        let other = others(i);
        let summed = |l: &Label| !output.contains(l) && !other.contains(l);
        let axes: Vec<i64> = (0..labels.len()).filter(|&a| summed(&labels[a])).map(|a| a as i64).collect();
        operands.push(if axes.is_empty() { vec![] } else { vec![Step::ReduceSum(axes)] });
        kept.push(labels.iter().copied().filter(|l| !summed(l)).collect::<Vec<_>>());
    }
    if kept.len() == 1 {
        let perm = permutation(&kept[0], &output);
        if !is_identity(&perm) {
            operands[0].push(Step::Transpose(perm));
        }
        if operands[0].is_empty() {
            operands[0].push(Step::Identity);
        }
        return Ok(Lowering { operands, after: vec![] });
    }
    let (a, b) = (&kept[0], &kept[1]);
    let batch: Vec<Label> = output.iter().copied().filter(|l| a.contains(l) && b.contains(l)).collect();
    let contracted: Vec<Label> = a.iter().copied().filter(|l| b.contains(l) && !output.contains(l)).collect();
    let m: Vec<Label> = a.iter().copied().filter(|l| !b.contains(l)).collect();
    let n: Vec<Label> = b.iter().copied().filter(|l| !a.contains(l)).collect();
    let size = |ls: &[Label]| ls.iter().map(|l| sizes[l] as i64).product::<i64>();
    // A [batch, m, contracted] · B [batch, contracted, n] → [batch, m, n]; with no batch
    // labels and one kept label of B, A keeps its kept axes, [m..., contracted] (MatMul
    // broadcasts B over them).
    let broadcast_b = batch.is_empty() && n.len() == 1 && !m.is_empty();
    let a_order: Vec<Label> = [&batch[..], &m, &contracted].concat();
    let b_order: Vec<Label> = [&batch[..], &contracted, &n].concat();
    let keep = vec![0i64; batch.len()];
    let a_grouped = if broadcast_b {
        [&vec![0i64; m.len()][..], &[size(&contracted)]].concat()
    } else {
        [&keep[..], &[size(&m), size(&contracted)]].concat()
    };
    let b_grouped = [&keep[..], &[size(&contracted), size(&n)]].concat();
    for ((steps, labels), (order, grouped)) in
        operands.iter_mut().zip([a, b]).zip([(&a_order, a_grouped), (&b_order, b_grouped)])
    {
        let perm = permutation(labels, order);
        if !is_identity(&perm) {
            steps.push(Step::Transpose(perm));
        }
        let ordered: Vec<i64> = order.iter().map(|l| sizes[l] as i64).collect();
        if !same_shape(&ordered, &grouped) {
            steps.push(Step::Reshape(grouped));
        }
    }
    let mut after = Vec::new();
    let product: Vec<Label> = [&batch[..], &m, &n].concat();
    let grouped: Vec<i64> = if broadcast_b {
        product.iter().map(|l| sizes[l] as i64).collect()
    } else {
        [&keep[..], &[size(&m), size(&n)]].concat()
    };
    let ungrouped: Vec<i64> = product.iter().map(|l| sizes[l] as i64).collect();
    if !same_shape(&ungrouped, &grouped) {
        after.push(Step::Reshape([&keep[..], &ungrouped[batch.len()..]].concat()));
    }
    let perm = permutation(&product, &output);
    if !is_identity(&perm) {
        after.push(Step::Transpose(perm));
    }
    Ok(Lowering { operands, after })
}

/// The labels of one term; with `rank`, `...` becomes its axes, else the marker
/// `ELLIPSIS_BASE - 1` (the output's, expanded by the caller).
fn labels(term: &str, rank: Option<usize>) -> Result<Vec<Label>, String> {
    let dots = term.matches("...").count();
    if dots > 1 || term.replace("...", "").contains('.') {
        return Err(format!("term '{term}' has a misplaced '.'"));
    }
    let (before, after) = term.split_once("...").unwrap_or((term, ""));
    let letters =
        |s: &str| -> Result<Vec<Label>, String> {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphabetic() {
                        Ok(c as Label)
                    } else {
                        Err(format!("term '{term}' has label '{c}'"))
                    }
                })
                .collect()
        };
    let (before, after) = (letters(before)?, letters(after)?);
    let named = before.len() + after.len();
    let middle: Vec<Label> = match (dots, rank) {
        (0, Some(rank)) if rank != named => {
            return Err(format!("term '{term}' names {named} axes of an operand of rank {rank}"));
        }
        (0, _) => vec![],
        (_, Some(rank)) => {
            let extra = rank
                .checked_sub(named)
                .ok_or_else(|| format!("term '{term}' names more axes than its operand's {rank}"))?;
            (0..extra).rev().map(|k| ELLIPSIS_BASE + k as Label).collect()
        }
        (_, None) => vec![ELLIPSIS_BASE - 1],
    };
    Ok([before, middle, after].concat())
}

/// The implicit output: the `...` axes (widest operand's), then the letters used once, sorted.
fn implicit_output(inputs: &[Vec<Label>]) -> Vec<Label> {
    let all: Vec<Label> = inputs.iter().flatten().copied().collect();
    let mut dots: Vec<Label> = all.iter().copied().filter(|&l| l >= ELLIPSIS_BASE).collect();
    dots.sort_unstable_by(|a, b| b.cmp(a));
    dots.dedup();
    let mut once: Vec<Label> =
        all.iter().copied().filter(|&l| l < ELLIPSIS_BASE && all.iter().filter(|&&x| x == l).count() == 1).collect();
    once.sort_unstable();
    [dots, once].concat()
}

/// The `Transpose` permutation taking axes labelled `from` to the order `to`.
fn permutation(from: &[Label], to: &[Label]) -> Vec<i64> {
    to.iter().map(|l| from.iter().position(|x| x == l).unwrap_or(0) as i64).collect()
}

fn is_identity(perm: &[i64]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| p == i as i64)
}

/// Whether a target of a `Reshape` (0 keeps the axis) gives `shape` from `shape`.
fn same_shape(shape: &[i64], target: &[i64]) -> bool {
    shape.len() == target.len() && shape.iter().zip(target).all(|(&s, &t)| t == 0 || s == t)
}

/// A label as the equation wrote it (`...` axes as `.`).
fn show(l: Label) -> String {
    char::from_u32(l).filter(|_| l < ELLIPSIS_BASE - 1).map_or_else(|| "...".to_string(), String::from)
}

#[cfg(test)]
mod tests {
    use super::Step::*;
    use super::*;

    fn steps(equation: &str, shapes: &[&[usize]]) -> Lowering {
        lower(equation, shapes).unwrap_or_else(|e| panic!("{equation}: {e}"))
    }

    #[test]
    fn attention_contractions_take_one_matmul_and_at_most_one_transpose_per_operand() {
        let scores = steps("bhqd,bhkd->bhqk", &[&[2, 4, 8, 16], &[2, 4, 8, 16]]);
        assert_eq!(scores, Lowering { operands: vec![vec![], vec![Transpose(vec![0, 1, 3, 2])]], after: vec![] });
        let context = steps("bhqk,bhkd->bhqd", &[&[2, 4, 8, 8], &[2, 4, 8, 16]]);
        assert_eq!(context, Lowering { operands: vec![vec![], vec![]], after: vec![] });
        let batched = steps("bij, bjk -> bik", &[&[5, 2, 3], &[5, 3, 4]]);
        assert_eq!(batched, Lowering { operands: vec![vec![], vec![]], after: vec![] });
        let linear = steps("bsd,de->bse", &[&[2, 8, 16], &[16, 32]]);
        assert_eq!(linear, Lowering { operands: vec![vec![], vec![]], after: vec![] });
        let heads_second = steps("bqhd,bkhd->bhqk", &[&[2, 8, 4, 16], &[2, 8, 4, 16]]);
        assert_eq!(
            heads_second,
            Lowering {
                operands: vec![vec![Transpose(vec![0, 2, 1, 3])], vec![Transpose(vec![0, 2, 3, 1])]],
                after: vec![]
            }
        );
        // An output projection over heads: A's kept axes stay, its contracted ones merge.
        let projection = steps("bhsd,hde->bse", &[&[2, 4, 8, 16], &[4, 16, 32]]);
        assert_eq!(
            projection,
            Lowering {
                operands: vec![vec![Transpose(vec![0, 2, 1, 3]), Reshape(vec![0, 0, 64])], vec![Reshape(vec![64, 32])]],
                after: vec![]
            }
        );
        let ellipsis = steps("...qd,...kd->...qk", &[&[2, 4, 8, 16], &[2, 4, 8, 16]]);
        assert_eq!(ellipsis, scores);
    }

    #[test]
    fn other_forms_group_and_sum() {
        // Inner product: [1, K] · [K, 1] → a scalar.
        let inner = steps("i,i", &[&[5], &[5]]);
        assert_eq!(
            inner,
            Lowering {
                operands: vec![vec![Reshape(vec![1, 5])], vec![Reshape(vec![5, 1])]],
                after: vec![Reshape(vec![])]
            }
        );
        assert_eq!(steps("ij->ji", &[&[3, 4]]).operands, vec![vec![Transpose(vec![1, 0])]]);
        assert_eq!(steps("ij->i", &[&[3, 4]]).operands, vec![vec![ReduceSum(vec![1])]]);
        assert_eq!(steps("ij", &[&[3, 4]]).operands, vec![vec![Identity]]);
        assert_eq!(steps("ji", &[&[3, 4]]).operands, vec![vec![Transpose(vec![1, 0])]]);
        // Two kept labels of A and of B: grouped, multiplied, ungrouped.
        let outer = steps("ab,cd->abcd", &[&[2, 3], &[4, 5]]);
        assert_eq!(
            outer,
            Lowering {
                operands: vec![vec![Reshape(vec![6, 1])], vec![Reshape(vec![1, 20])]],
                after: vec![Reshape(vec![2, 3, 4, 5])]
            }
        );
        // A label only B holds and the output drops is summed before the product.
        let summed = steps("bij,bjk->bi", &[&[2, 3, 4], &[2, 4, 5]]);
        assert_eq!(summed.operands[1][0], ReduceSum(vec![2]));
    }

    #[test]
    fn refused_forms_say_why() {
        let refuse = |e: &str, shapes: &[&[usize]]| lower(e, shapes).unwrap_err();
        assert!(refuse("ii->i", &[&[3, 3]]).contains("repeats 'i' within one operand"));
        assert!(refuse("ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 5]]).contains("has 3 operands"));
        assert!(refuse("bij,bjk->bik", &[&[1, 2, 3], &[5, 3, 4]]).contains("gives 'b' sizes 1 and 5"));
        assert!(refuse("ij,jk->ik", &[&[2, 3, 4], &[3, 4]]).contains("names 2 axes of an operand of rank 3"));
        assert!(refuse("ij,jk->iz", &[&[2, 3], &[3, 4]]).contains("output label 'z'"));
        assert!(refuse("i1,1k", &[&[2, 3], &[3, 4]]).contains("has label '1'"));
    }
}
