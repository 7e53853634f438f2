"""How far the with-replacement certificate can be from the truth: silodp's default certificate
(the best of pld's multiplicity-hiding bound, rdp and advanced) against the rigorous lower bound of
one concrete neighbouring pair (:mod:`silodp.accounting.replacement_lower`), for issue 23's case
and the regimes of accounting_with_replacement.png. The table of docs/accounting.md
(``silodp report --generated with_replacement_gap --into docs/accounting.md``).

    python docs/figures/with_replacement_gap.py
"""

from silodp.experiments.doctables import with_replacement_gap

if __name__ == "__main__":
    print(with_replacement_gap())
