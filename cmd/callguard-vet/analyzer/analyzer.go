// Package analyzer is callguard's order lint as a static analyzer
// (golang.org/x/tools/go/analysis), for go vet -vettool, gopls and any
// other driver: for every chain.New(...) and chain.Options{...}.New(...)
// call, it reports the findings chain.New will report when the program
// runs, at the argument the finding is about.
//
// It runs the same rule code: where a policy's constructor and its
// options are called with constants (directly, or through a local
// variable assigned once in the same function), the analyzer calls the
// same constructors with the same values and hands the policies to the
// same chain.New, so its findings are chain.New's, word for word. A
// setting it cannot know (a variable, a function's result, a policy built
// in another function, a slice of policies) is never guessed: a finding
// that involves it says which settings are unknown, and gives the rule
// without numbers. A chain with a policy of a type it does not know (a
// user's own) is linted with that policy as an opaque step, as chain.New
// does.
//
// A constructor that will fail (retry.New with MaxAttempts(0), a
// breaker.Settings field out of range) is reported too, with its error.
//
// Spec files it can see are linted too, by package spec itself: one
// named in a comment,
//
//	//callguard:spec deploy/chain.yaml
//
// relative to the Go file's directory, and one a //go:embed directive puts
// in a variable that is passed to spec.Parse; their errors and findings
// are reported at the comment or the variable.
//
// A finding is suppressed by a comment on the line of the call or the
// line above it, with a reason, as staticcheck's //lint:ignore:
//
//	//callguard:ignore CG015 the tail is checked by the load test
//
// Warnings and errors are always reported; infos (a trade-off the chain
// makes, said in numbers, such as CG015 on the recommended
// chain.New(retry, breaker, timeout)) only with the analyzer's flag
// -infos (go vet -vettool=$(which callguard-vet) -infos ./...; named
// -callguard.infos in a driver of several analyzers), since a driver such
// as go vet fails on any finding. A package's findings are reported in
// the order of their positions (file, line, column).
package analyzer

import (
	"cmp"
	"context"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/callguard/callguard/breaker"
	"github.com/callguard/callguard/chain"
	"github.com/callguard/callguard/fallback"
	"github.com/callguard/callguard/hedge"
	"github.com/callguard/callguard/limit"
	"github.com/callguard/callguard/retry"
	"github.com/callguard/callguard/throttle"
	"github.com/callguard/callguard/timeout"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// Analyzer is the order lint.
var Analyzer = &analysis.Analyzer{
	Name: "callguard",
	Doc:  "report what chain.New's order lint will report when the program runs (docs/vet.md)",
	URL:  "https://github.com/callguard/callguard/blob/main/docs/vet.md",
	Run:  run,
}

// infos is the analyzer's flag -infos: report infos too.
var infos bool

func init() {
	Analyzer.Flags.BoolVar(&infos, "infos", false,
		"report infos too (a trade-off the chain makes, such as CG015), not only warnings and errors")
}

// reported reports whether a finding of severity s is reported.
func reported(s chain.Severity) bool { return s != chain.SeverityInfo || infos }

func run(pass *analysis.Pass) (any, error) {
	// The findings are collected, then reported in the order of their
	// positions (file, line, column; then message), whatever the order
	// the files and calls were visited in.
	var diags []analysis.Diagnostic
	report := pass.Report
	collect := *pass
	collect.Report = func(d analysis.Diagnostic) { diags = append(diags, d) }
	lintFiles(&collect)
	slices.SortStableFunc(diags, func(a, b analysis.Diagnostic) int {
		pa, pb := pass.Fset.Position(a.Pos), pass.Fset.Position(b.Pos)
		return cmp.Or(cmp.Compare(pa.Filename, pb.Filename), cmp.Compare(pa.Line, pb.Line),
			cmp.Compare(pa.Column, pb.Column), cmp.Compare(a.Message, b.Message))
	})
	for _, d := range diags {
		report(d)
	}
	return nil, nil
}

// lintFiles lints the package's files.
func lintFiles(pass *analysis.Pass) {
	for _, f := range pass.Files {
		ignores := ignoresOf(pass, f)
		specs(pass, f, ignores)
		ast.Inspect(f, func(n ast.Node) bool {
			fd, ok := n.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				return true
			}
			e := &evaluator{info: pass.TypesInfo, defs: map[*types.Var]def{}}
			e.collect(fd.Body)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncLit:
					// A closure's own variables: collected with the
					// function's (assigned once or unknown).
					return true
				case *ast.CallExpr:
					check(pass, e, n, ignores)
				}
				return true
			})
			return false
		})
	}
}

// check lints one call, if it is chain.New or Options.New, and reports a
// constructor that will fail.
func check(pass *analysis.Pass, e *evaluator, call *ast.CallExpr, ignores map[int][]ignore) {
	fn, _ := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
	if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != modulePath+"/chain" || fn.Name() != "New" {
		if fn != nil && fn.Pkg() != nil {
			if _, ours := funcs[fn.Pkg().Path()+"."+fn.Name()]; ours && fn.Signature().Results().Len() > 1 {
				if v := e.result(call, 0, nil, 0); v.err != nil && len(v.unknown) == 0 {
					report(pass, ignores, call.Pos(), "", fmt.Sprintf("%s will fail: %v", short(fn), v.err))
				}
			}
		}
		return
	}
	opts := chain.Options{}
	if recv := fn.Signature().Recv(); recv != nil {
		sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
		if !ok {
			return
		}
		o := e.eval(sel.X, reflect.TypeFor[chain.Options](), 0)
		if !o.known() {
			return // options the analyzer cannot know: Strict, Ignore, the deadlines
		}
		opts = o.v.Interface().(chain.Options)
	}
	if call.Ellipsis.IsValid() {
		return // chain.New(ps...): a slice the analyzer does not follow
	}
	type arg struct {
		expr    ast.Expr
		p       chain.Policy
		unknown []string
	}
	var args []arg
	policyType := reflect.TypeFor[chain.Policy]()
	for _, a := range call.Args {
		v := e.eval(a, policyType, 0)
		var p chain.Policy
		if v.v.IsValid() && v.v.Type().Implements(policyType) && !isNilPolicy(v.v) {
			p = v.v.Interface().(chain.Policy)
		}
		if p == nil || len(v.unknown) > 0 {
			// Built from settings not all known: a stand-in of its kind,
			// whose findings are said without numbers.
			stand, kind := standIn(pass.TypesInfo.TypeOf(a))
			if stand == nil {
				return // a chain, or a value the analyzer cannot place
			}
			p = stand
			if len(v.unknown) == 0 {
				v.unknown = []string{kind + " settings"}
			}
		}
		args = append(args, arg{a, p, v.unknown})
	}
	ps := make([]chain.Policy, len(args))
	for i, a := range args {
		ps[i] = a.p
	}
	findings, err := lint(opts, ps)
	if err != nil {
		report(pass, ignores, call.Pos(), "", "chain.New will fail: "+err.Error())
		return
	}
	for _, f := range findings {
		if !reported(f.Severity) {
			continue
		}
		// The argument the finding is about: the first policy its message
		// names.
		pos, first := call.Pos(), -1
		var unknown []string
		for _, a := range args {
			st, ok := a.p.(fmt.Stringer)
			if !ok {
				continue
			}
			name := st.String()
			at := strings.Index(f.Message, name)
			if at < 0 {
				continue
			}
			if first < 0 || at < first {
				pos, first = a.expr.Pos(), at
			}
			unknown = append(unknown, a.unknown...)
		}
		msg := f.String()
		if len(unknown) > 0 && !orderRules[f.Code] {
			continue // it may hang on the settings the analyzer does not know
		}
		if len(unknown) > 0 {
			msg = fmt.Sprintf("chain: %s %s (unknown to the analyzer: %s): %s; chain.New says it in numbers when the program runs",
				f.Severity, f.Code, strings.Join(slices.Compact(unknown), ", "), summary(f.Code))
		}
		report(pass, ignores, pos, f.Code, msg)
	}
}

// lint runs chain.New (Options.New) itself, and recovers from a panic in
// the kit's code: the analyzer must not.
func lint(o chain.Options, ps []chain.Policy) (fs []chain.Finding, err error) {
	defer func() {
		if r := recover(); r != nil {
			fs, err = nil, nil
		}
	}()
	c, err := o.New(ps...)
	if err != nil {
		return nil, err
	}
	return c.Findings(), nil
}

// orderRules are the rules whose finding holds whatever the settings of
// the policies it names: the only ones said of a policy whose settings
// the analyzer does not know.
var orderRules = map[string]bool{
	"CG002": true, "CG006": true, "CG008": true, "CG009": true, "CG016": true,
	"CG017": true, "CG018": true, "CG021": true, "CG024": true, "CG026": true,
}

func isNilPolicy(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// standIn is a policy of t's kind with default settings, for one whose
// settings are not all known, and the kind's name; nil for a type the
// lint would treat differently (a chain) or none. A user's own policy is
// an opaque step, as for chain.New.
func standIn(t types.Type) (chain.Policy, string) {
	if t == nil {
		return nil, ""
	}
	name := types.TypeString(t, nil)
	must := func(p chain.Policy, err error) chain.Policy {
		if err != nil {
			return nil
		}
		return p
	}
	switch name {
	case "*" + modulePath + "/retry.Policy":
		return must(retry.New()), "retry"
	case "*" + modulePath + "/breaker.Breaker":
		return must(breaker.New(breaker.Settings{})), "breaker"
	case "*" + modulePath + "/timeout.Policy":
		return must(timeout.New(1)), "timeout"
	case "*" + modulePath + "/hedge.Policy":
		return must(hedge.New(hedge.Settings{Delay: 1})), "hedge"
	case "*" + modulePath + "/limit.Limiter":
		return must(limit.New(limit.Settings{})), "limit"
	case "*" + modulePath + "/limit.Bulkhead":
		return must(limit.NewBulkhead(limit.BulkheadSettings{MaxConcurrent: 1})), "bulkhead"
	case "*" + modulePath + "/throttle.Throttle":
		return must(throttle.New(throttle.Settings{})), "throttle"
	case "*" + modulePath + "/fallback.Policy":
		return must(fallback.New(func(_ ctx, err error) error { return err })), "fallback"
	case "*" + modulePath + "/chain.Chain", modulePath + "/chain.Policy":
		return nil, ""
	}
	if hasDo(t) {
		return opaque{name}, name
	}
	return nil, ""
}

// hasDo reports a type with chain.Policy's method, Do(ctx, call) error.
func hasDo(t types.Type) bool {
	sel := types.NewMethodSet(t).Lookup(nil, "Do")
	if sel == nil {
		return false
	}
	sig, ok := sel.Type().(*types.Signature)
	return ok && sig.Params().Len() == 2 && sig.Results().Len() == 1
}

type ctx = context.Context

// opaque stands in for a policy of a user's own type: chain.New lints it
// as a step it does not know.
type opaque struct{ name string }

func (o opaque) Do(c ctx, call func(ctx) error) error { return call(c) }
func (o opaque) String() string                       { return o.name }

// summary is a rule's summary, by code.
func summary(code string) string {
	for _, r := range chain.Rules() {
		if r.Code == code {
			return r.Summary
		}
	}
	return code
}

// ignore is a //callguard:ignore comment.
type ignore struct {
	codes  []string
	reason string
}

var ignoreRe = regexp.MustCompile(`^//\s*callguard:ignore\s+([A-Z0-9,]+)\s*(.*)$`)

// ignoresOf collects the file's //callguard:ignore comments by line; one
// without a reason is itself reported.
func ignoresOf(pass *analysis.Pass, f *ast.File) map[int][]ignore {
	out := map[int][]ignore{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			m := ignoreRe.FindStringSubmatch(c.Text)
			if m == nil {
				continue
			}
			reason, _, _ := strings.Cut(m[2], "//") // a comment after it is not a reason
			if strings.TrimSpace(reason) == "" {
				pass.Report(analysis.Diagnostic{Pos: c.Pos(), Message: "callguard:ignore " + m[1] + " needs a reason, after the codes"})
				continue
			}
			line := pass.Fset.Position(c.Pos()).Line
			out[line] = append(out[line], ignore{codes: strings.Split(m[1], ","), reason: reason})
		}
	}
	return out
}

// report reports msg at pos unless an ignore on its line or the line
// above names code.
func report(pass *analysis.Pass, ignores map[int][]ignore, pos token.Pos, code, msg string) {
	line := pass.Fset.Position(pos).Line
	for _, l := range []int{line, line - 1} {
		for _, ig := range ignores[l] {
			if slices.Contains(ig.codes, code) {
				return
			}
		}
	}
	pass.Report(analysis.Diagnostic{Pos: pos, Message: msg})
}
