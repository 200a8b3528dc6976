package analyzer

import (
	"go/ast"
	"go/constant"
	"go/types"
	"math"
	"reflect"
	"strings"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
	"golang.org/x/tools/go/types/typeutil"
)

// The analyzer does not reimplement the lint: where a policy's constructor
// and its options are called with constants, it calls the same
// constructors, with the same values, and hands the policies to the same
// chain.New. The functions and the settings types it can call and fill,
// by their full names.
var funcs = map[string]reflect.Value{}

var structs = map[string]reflect.Type{}

func init() {
	for name, fn := range map[string]any{
		"retry.New": retry.New, "retry.MaxAttempts": retry.MaxAttempts, "retry.Exponential": retry.Exponential,
		"retry.ExponentialBy": retry.ExponentialBy, "retry.Constant": retry.Constant, "retry.Jitter": retry.Jitter,
		"retry.RetryWhenOpen": retry.RetryWhenOpen, "retry.FitDeadline": retry.FitDeadline,
		"retry.MaxPushback": retry.MaxPushback, "retry.NewBudget": retry.NewBudget, "retry.WithBudget": retry.WithBudget,
		"retry.NewThrottle": retry.NewThrottle, "retry.WithThrottle": retry.WithThrottle,
		"retry.RetryIf": retry.RetryIf, "retry.OnRetry": retry.OnRetry,
		"breaker.New": breaker.New,
		"timeout.New": timeout.New, "timeout.Adaptive": timeout.Adaptive, "timeout.Latency": timeout.Latency,
		"hedge.New": hedge.New,
		"limit.New": limit.New, "limit.NewBulkhead": limit.NewBulkhead, "limit.AIMD": limit.AIMD, "limit.Gradient2": limit.Gradient2,
		"throttle.New": throttle.New,
		"fallback.New": fallback.New, "fallback.OnAnyFailure": fallback.OnAnyFailure, "fallback.When": fallback.When,
	} {
		funcs[modulePath+"/"+name] = reflect.ValueOf(fn)
	}
	for name, v := range map[string]any{
		"breaker.Settings": breaker.Settings{}, "timeout.AdaptiveOptions": timeout.AdaptiveOptions{},
		"hedge.Settings": hedge.Settings{}, "limit.Settings": limit.Settings{}, "limit.BulkheadSettings": limit.BulkheadSettings{},
		"limit.AIMDSettings": limit.AIMDSettings{}, "limit.Gradient2Settings": limit.Gradient2Settings{},
		"throttle.Settings": throttle.Settings{}, "chain.Options": chain.Options{},
	} {
		structs[modulePath+"/"+name] = reflect.TypeOf(v)
	}
}

const modulePath = "github.com/callguard/callguard"

// value is what the evaluator knows of an expression: its value, built by
// the kit's own code, or, when some of it is not a constant, what it
// could not know (said in the findings as unknown, never guessed).
type value struct {
	v       reflect.Value
	unknown []string // e.g. "retry.MaxAttempts(n)"; empty: v is exact
	err     error    // the constructor's own error: the program fails there
}

func (x value) known() bool { return x.v.IsValid() && len(x.unknown) == 0 }

// evaluator evaluates the expressions of one file's functions.
type evaluator struct {
	info *types.Info
	// defs maps a local variable assigned once to the expression that
	// assigned it, and which of its results (for p, err := New(...)).
	defs map[*types.Var]def
	// vals keeps what each variable evaluated to: a policy named twice
	// is the same policy twice (CG025), as in the program.
	vals map[*types.Var]value
}

type def struct {
	rhs   ast.Expr
	index int
}

// collect finds, in fn, the variables assigned exactly once.
func (e *evaluator) collect(body *ast.BlockStmt) {
	count := map[*types.Var]int{}
	record := func(lhs []ast.Expr, rhs []ast.Expr) {
		for i, l := range lhs {
			id, ok := l.(*ast.Ident)
			if !ok {
				continue
			}
			obj, _ := e.info.ObjectOf(id).(*types.Var)
			if obj == nil {
				continue
			}
			count[obj]++
			switch {
			case len(rhs) == len(lhs):
				e.defs[obj] = def{rhs[i], 0}
			case len(rhs) == 1:
				e.defs[obj] = def{rhs[0], i}
			}
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			record(n.Lhs, n.Rhs)
		case *ast.ValueSpec:
			lhs := make([]ast.Expr, len(n.Names))
			for i, id := range n.Names {
				lhs[i] = id
			}
			record(lhs, n.Values)
		case *ast.RangeStmt:
			record([]ast.Expr{n.Key, n.Value}, nil) // assigned each iteration: unknown
			if n.Key != nil {
				if v, ok := e.info.ObjectOf(identOf(n.Key)).(*types.Var); ok {
					count[v] += 2
				}
			}
			if n.Value != nil {
				if v, ok := e.info.ObjectOf(identOf(n.Value)).(*types.Var); ok {
					count[v] += 2
				}
			}
		case *ast.UnaryExpr:
			if id, ok := n.X.(*ast.Ident); ok && n.Op.String() == "&" {
				if v, ok := e.info.ObjectOf(id).(*types.Var); ok {
					count[v] += 2 // its address escapes: it may change
				}
			}
		}
		return true
	})
	for v, n := range count {
		if n != 1 {
			delete(e.defs, v)
		}
	}
}

func identOf(x ast.Expr) *ast.Ident {
	id, _ := x.(*ast.Ident)
	if id == nil {
		return &ast.Ident{}
	}
	return id
}

// eval evaluates x as a value of type t (nil: x's own type, which must be
// one the evaluator can make).
func (e *evaluator) eval(x ast.Expr, t reflect.Type, depth int) value {
	if depth > 20 {
		return unknownOf(x)
	}
	x = ast.Unparen(x)
	if tv, ok := e.info.Types[x]; ok && tv.Value != nil && t != nil {
		if v, ok := constantValue(tv.Value, t); ok {
			return value{v: v}
		}
		return unknownOf(x)
	}
	if t != nil && t.Kind() == reflect.Func {
		// A callback (IsExcluded, RetryIf, a fallback's function): the
		// lint asks only whether it is there.
		if id, ok := x.(*ast.Ident); ok && id.Name == "nil" {
			return value{v: reflect.Zero(t)}
		}
		return value{v: reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, t.NumOut())
			for i := range out {
				out[i] = reflect.Zero(t.Out(i))
			}
			return out
		})}
	}
	switch x := x.(type) {
	case *ast.Ident:
		if v, ok := e.info.ObjectOf(x).(*types.Var); ok {
			if d, ok := e.defs[v]; ok {
				if got, ok := e.vals[v]; ok {
					return got
				}
				got := e.result(d.rhs, d.index, t, depth+1)
				if e.vals == nil {
					e.vals = map[*types.Var]value{}
				}
				e.vals[v] = got
				return got
			}
		}
	case *ast.CallExpr:
		return e.result(x, 0, t, depth+1)
	case *ast.CompositeLit:
		return e.composite(x, depth+1)
	case *ast.UnaryExpr:
		if x.Op.String() == "&" {
			inner := e.eval(x.X, nil, depth+1)
			if inner.v.IsValid() {
				p := reflect.New(inner.v.Type())
				p.Elem().Set(inner.v)
				inner.v = p
			}
			return inner
		}
	}
	return unknownOf(x)
}

// result evaluates result i of x, a call (or an expression, i = 0).
func (e *evaluator) result(x ast.Expr, i int, t reflect.Type, depth int) value {
	call, ok := ast.Unparen(x).(*ast.CallExpr)
	if !ok {
		if i != 0 {
			return unknownOf(x)
		}
		return e.eval(x, t, depth)
	}
	fn, _ := typeutil.Callee(e.info, call).(*types.Func)
	if fn == nil || fn.Pkg() == nil {
		return unknownOf(x)
	}
	f, ok := funcs[fn.Pkg().Path()+"."+fn.Name()]
	if !ok || fn.Signature().Recv() != nil {
		return unknownOf(x)
	}
	ft := f.Type()
	var args []reflect.Value
	var unknown []string
	var err error
	for j, a := range call.Args {
		pt := paramType(ft, j)
		if call.Ellipsis.IsValid() && j == len(call.Args)-1 {
			return unknownOf(x) // opts...: a slice the analyzer does not follow
		}
		av := e.eval(a, pt, depth)
		if av.err != nil && err == nil {
			err = av.err
		}
		if !av.v.IsValid() {
			if ft.IsVariadic() && j >= ft.NumIn()-1 {
				unknown = append(unknown, av.unknown...) // an option left out
				continue
			}
			return value{unknown: append(unknown, av.unknown...), err: err}
		}
		unknown = append(unknown, av.unknown...)
		if !av.v.Type().AssignableTo(pt) {
			if av.v.Type().ConvertibleTo(pt) {
				av.v = av.v.Convert(pt)
			} else {
				return value{unknown: append(unknown, short(fn)+": an argument of an unexpected type"), err: err}
			}
		}
		args = append(args, av.v)
	}
	out := safeCall(f, args)
	if out == nil {
		return value{unknown: append(unknown, short(fn)), err: err}
	}
	if last := out[len(out)-1]; ft.NumOut() > 1 && last.Type() == errorType && !last.IsNil() && len(unknown) == 0 && err == nil {
		err = last.Interface().(error)
	}
	if i >= len(out) {
		return unknownOf(x)
	}
	return value{v: out[i], unknown: unknown, err: err}
}

var errorType = reflect.TypeFor[error]()

// safeCall calls f, and gives nil if it panics: the analyzer must not.
func safeCall(f reflect.Value, args []reflect.Value) (out []reflect.Value) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	return f.Call(args)
}

func paramType(ft reflect.Type, j int) reflect.Type {
	if ft.IsVariadic() && j >= ft.NumIn()-1 {
		return ft.In(ft.NumIn() - 1).Elem()
	}
	if j < ft.NumIn() {
		return ft.In(j)
	}
	return nil
}

// composite fills a settings struct the evaluator knows.
func (e *evaluator) composite(x *ast.CompositeLit, depth int) value {
	named, _ := types.Unalias(e.info.TypeOf(x)).(*types.Named)
	if named == nil || named.Obj().Pkg() == nil {
		return unknownOf(x)
	}
	st, ok := structs[named.Obj().Pkg().Path()+"."+named.Obj().Name()]
	if !ok {
		return unknownOf(x)
	}
	v := reflect.New(st).Elem()
	var unknown []string
	var err error
	for _, elt := range x.Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			return unknownOf(x) // positional fields: not written so here
		}
		name := identOf(kv.Key).Name
		f := v.FieldByName(name)
		if !f.IsValid() || !f.CanSet() {
			return unknownOf(x)
		}
		fv := e.eval(kv.Value, f.Type(), depth)
		if fv.err != nil && err == nil {
			err = fv.err
		}
		if !fv.v.IsValid() {
			unknown = append(unknown, named.Obj().Name()+"."+name)
			continue
		}
		unknown = append(unknown, fv.unknown...)
		switch {
		case fv.v.Type().AssignableTo(f.Type()):
			f.Set(fv.v)
		case fv.v.Type().ConvertibleTo(f.Type()):
			f.Set(fv.v.Convert(f.Type()))
		default:
			unknown = append(unknown, named.Obj().Name()+"."+name)
		}
	}
	return value{v: v, unknown: unknown, err: err}
}

// unknownOf is an expression the analyzer cannot evaluate, named as the
// source says it.
func unknownOf(x ast.Expr) value {
	return value{unknown: []string{exprString(x)}}
}

func exprString(x ast.Expr) string {
	var b strings.Builder
	writeExpr(&b, x)
	s := b.String()
	if len(s) > 60 {
		s = s[:57] + "…"
	}
	return s
}

func writeExpr(b *strings.Builder, x ast.Expr) {
	switch x := x.(type) {
	case *ast.Ident:
		b.WriteString(x.Name)
	case *ast.SelectorExpr:
		writeExpr(b, x.X)
		b.WriteString("." + x.Sel.Name)
	case *ast.CallExpr:
		writeExpr(b, x.Fun)
		b.WriteString("(…)")
	case *ast.ParenExpr:
		writeExpr(b, x.X)
	case *ast.CompositeLit:
		writeExpr(b, x.Type)
		b.WriteString("{…}")
	case *ast.UnaryExpr:
		b.WriteString(x.Op.String())
		writeExpr(b, x.X)
	default:
		b.WriteString("an expression")
	}
}

func short(fn *types.Func) string { return fn.Pkg().Name() + "." + fn.Name() }

// constantValue converts a constant to t.
func constantValue(c constant.Value, t reflect.Type) (reflect.Value, bool) {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, exact := constant.Int64Val(constant.ToInt(c))
		if !exact || v.OverflowInt(n) {
			return v, false
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, exact := constant.Uint64Val(constant.ToInt(c))
		if !exact || v.OverflowUint(n) {
			return v, false
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, _ := constant.Float64Val(constant.ToFloat(c))
		if math.IsInf(f, 0) {
			return v, false
		}
		v.SetFloat(f)
	case reflect.Bool:
		if c.Kind() != constant.Bool {
			return v, false
		}
		v.SetBool(constant.BoolVal(c))
	case reflect.String:
		if c.Kind() != constant.String {
			return v, false
		}
		v.SetString(constant.StringVal(c))
	default:
		return v, false
	}
	return v, true
}
