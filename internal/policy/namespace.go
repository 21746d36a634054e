package policy

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Errors of CheckNamespace.
var (
	// ErrNamespaceNotAllowed: the policy's namespaceSelector does not select the session's
	// namespace.
	ErrNamespaceNotAllowed = errors.New("namespace not allowed")
	// ErrInvalidNamespaceSelector: the selector does not parse; it selects nothing.
	ErrInvalidNamespaceSelector = errors.New("invalid namespaceSelector")
)

// Selector is p's namespace selector as a labels.Selector: everything for a
// CompactionPolicy or a ClusterCompactionPolicy without one.
func (p *Policy) Selector() (labels.Selector, error) {
	if p.NamespaceSelector == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", p.Kind, p.Name, ErrInvalidNamespaceSelector, err)
	}
	return sel, nil
}

// CheckNamespace returns an error wrapping ErrNamespaceNotAllowed (or
// ErrInvalidNamespaceSelector) when sessions of namespace may not use p. c reads the
// namespace's metadata (from the manager's cache, which watches namespace metadata); it is
// only read for a policy with a selector.
func (p *Policy) CheckNamespace(ctx context.Context, c client.Reader, namespace string) error {
	if p.NamespaceSelector == nil {
		return nil
	}
	sel, err := p.Selector()
	if err != nil {
		return err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Get(ctx, types.NamespacedName{Name: namespace}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: namespace %s not found (yet)", ErrNamespaceNotAllowed, namespace)
		}
		return fmt.Errorf("read namespace %s: %w", namespace, err)
	}
	if !sel.Matches(labels.Set(m.Labels)) {
		return fmt.Errorf("%w: %s %s's namespaceSelector (%s) does not select namespace %s", ErrNamespaceNotAllowed, p.Kind, p.Name, sel, namespace)
	}
	return nil
}
